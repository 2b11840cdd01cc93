// The worker protocol's client: connect-es over the Connect protocol.
import { createClient, ConnectError, Code } from '@connectrpc/connect';
import { createConnectTransport } from '@connectrpc/connect-node';
import { timestampFromDate, timestampDate } from '@bufbuild/protobuf/wkt';
import { WorkerService, ErrorDetailSchema } from '../gen/trellis/worker/v1/worker_pb.js';

export { WorkerService, ConnectError, Code };

/**
 * A client of WorkerService at baseUrl, sending the bearer token with every call.
 * httpVersion "1.1" or "2" (default "2": the streams share one connection).
 * Over HTTP/2 the connection is checked with PING frames every pingIntervalMs,
 * idle or not, and closed (its calls and streams failing) when a PING is not
 * answered within pingTimeoutMs: a dead peer or a half-open connection is found
 * instead of wedging the claim and cancel streams.
 */
export function workerClient(baseUrl, token, { httpVersion = '2', useBinaryFormat = true, pingIntervalMs = 10_000, pingTimeoutMs = 10_000 } = {}) {
  const h2 = httpVersion === '2' ? { pingIntervalMs, pingTimeoutMs, pingIdleConnection: true } : {};
  const transport = createConnectTransport({
    baseUrl,
    httpVersion,
    useBinaryFormat,
    ...h2,
    interceptors: [
      (next) => async (req) => {
        if (token) req.header.set('Authorization', `Bearer ${token}`);
        return next(req);
      },
    ],
  });
  return createClient(WorkerService, transport);
}

/** The stable reason of a protocol error ("" when it carries none). */
export function reasonOf(err) {
  if (err instanceof ConnectError) {
    const d = err.findDetails(ErrorDetailSchema);
    if (d.length > 0) return d[0].reason;
  }
  return '';
}

export function ts(d) {
  return d ? timestampFromDate(d) : undefined;
}

export function date(t) {
  return t ? timestampDate(t) : undefined;
}

/** A google.protobuf.Duration of ms milliseconds. */
export function duration(ms) {
  const s = Math.floor(ms / 1000);
  return { seconds: BigInt(s), nanos: Math.round((ms - s * 1000) * 1e6) };
}
