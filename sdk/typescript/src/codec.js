// Payloads are JSON through a server: encode and decode them as UTF-8 bytes.
const enc = new TextEncoder();
const dec = new TextDecoder('utf-8', { fatal: true });

/** Encodes v as JSON bytes; undefined encodes as null. */
export function encode(v) {
  const s = JSON.stringify(v === undefined ? null : v);
  if (s === undefined) throw new TypeError(`value of type ${typeof v} does not encode as JSON`);
  return enc.encode(s);
}

/** Encodes a string already holding JSON. */
export function encodeRaw(s) {
  return enc.encode(s);
}

/** Decodes JSON bytes (absent: undefined). */
export function decode(b) {
  if (b === undefined || b === null || b.length === 0) return undefined;
  return JSON.parse(dec.decode(b));
}

/** The bytes as text. */
export function text(b) {
  return b ? dec.decode(b) : '';
}

/** An RFC 3339 time in UTC (milliseconds). */
export function rfc3339(d) {
  return d.toISOString();
}

/** A wait reason's time, as the Go engine writes it: RFC 3339 UTC to the millisecond. */
export function reasonTime(d) {
  return d.toISOString();
}
