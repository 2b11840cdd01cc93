// Timers longer than Node's setTimeout allows. Node caps a delay at 2^31-1 ms
// (about 24.8 days) and fires a longer one after 1 ms, so a run's deadline or a
// step's timeout weeks away would fire at once. longTimeout re-arms in chunks
// under the cap until the due time.

/** The longest delay setTimeout honours. */
export const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** Calls fn after ms milliseconds, however long; clear it with clearLongTimeout. */
export function longTimeout(fn, ms) {
  const h = { t: null };
  const due = Date.now() + Math.max(0, ms);
  const arm = () => {
    const left = due - Date.now();
    h.t = left > MAX_TIMEOUT_MS ? setTimeout(arm, MAX_TIMEOUT_MS) : setTimeout(fn, Math.max(0, left));
  };
  arm();
  return h;
}

/** Stops a timer of longTimeout (null or undefined: nothing to do). */
export function clearLongTimeout(h) {
  if (h) clearTimeout(h.t);
}
