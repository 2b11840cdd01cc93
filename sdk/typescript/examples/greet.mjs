// The README's quick start: a worker and a client in one process.
import { defineWorkflow, Worker, Client } from '@trellis/sdk';

const greet = defineWorkflow('greet', async (ctx, { name }) => {
  const hello = await ctx.step.run('hello', async () => `hello ${name}`);
  await ctx.sleep(1000);
  return ctx.step.run('shout', async () => hello.toUpperCase());
});

const server = process.env.TRELLIS_SERVER;
const token = process.env.TRELLIS_TOKEN;
const worker = new Worker({ server, token }).register(greet);
const running = worker.run(); // until SIGTERM / Ctrl-C, or stop()
const client = new Client({ server, token });
const run = await client.start(greet, { name: 'ada' });
console.log(await client.result(run.id)); // HELLO ADA
await worker.stop();
await running;
