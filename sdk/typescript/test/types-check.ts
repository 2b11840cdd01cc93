// Compiled by `npm run typecheck` (tsc, no output): the declarations describe a
// typical program.
import { defineWorkflow, defineJob, Worker, Client, StepError, CancelledError } from '@trellis/sdk';

const greet = defineWorkflow<{ name: string }, string>('greet', async (ctx, input) => {
  const hello = await ctx.step.run('hello', async ({ attempt, signal }) => {
    signal.throwIfAborted();
    return `hello ${input.name} (${attempt})`;
  }, { retry: { maxAttempts: 4, initialInterval: 200 }, timeout: 1000 });
  await ctx.sleep(1000);
  const ev = await ctx.waitForEvent<{ ok: boolean }>('go', { timeout: 60_000 });
  const { index } = await ctx.select(ctx.timer(1000), ctx.event('pick'));
  const d = await ctx.approval('ship', { approvers: ['alice'] });
  try {
    await ctx.child(greet, { name: 'child' });
  } catch (err) {
    if (err instanceof CancelledError) await ctx.detached().step.run('cleanup', async () => 1);
    if (err instanceof StepError) return err.type;
  }
  ctx.emit('progress', { pct: 100 });
  ctx.set('k', 1);
  const now: Date = ctx.now();
  return `${hello} ${ev.ok} ${index} ${d.approved} ${now.toISOString()} ${ctx.uuid()} ${ctx.random()} ${ctx.patched('v2')}`;
});
const sum = defineJob('sum', async ({ a, b }: { a: number; b: number }) => a + b);

const w = new Worker({ server: 'http://127.0.0.1:7070', token: 't', queues: ['default'], concurrency: 10 });
w.register(greet, sum);
const c = new Client({ server: 'http://127.0.0.1:7070', token: 't' });
async function main() {
  const run = await c.start(greet, { name: 'x' }, { idempotencyKey: 'k' });
  const out: string = await c.result<string>(run.id, { timeout: 1000 });
  for await (const ev of c.stream(run.id)) console.log(ev.sequence, ev.name, out);
  await w.stop();
}
void main;
