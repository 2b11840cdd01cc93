"""The README's quick start: a worker and a client in one process.

    TRELLIS_SERVER=http://127.0.0.1:7070 TRELLIS_TOKEN=... python3 sdk/python/examples/greet.py
"""

import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # without pip install too

import trellis  # noqa: E402


@trellis.workflow("greet")
async def greet(ctx, inp):
    hello = await ctx.step.run("hello", lambda: f"hello {inp['name']}")
    await ctx.sleep(1)  # durable
    return await ctx.step.run("shout", lambda: hello.upper())


server, token = os.environ["TRELLIS_SERVER"], os.environ.get("TRELLIS_TOKEN")
worker = trellis.Worker(server, token).register(greet)
running = threading.Thread(target=worker.run)  # until stop(); worker.run() in the main thread also stops on SIGTERM
running.start()
client = trellis.Client(server, token)
run = client.start(greet, {"name": "ada"})
print(client.output(run["id"]))  # HELLO ADA
worker.stop()
running.join()
