// @trellis/sdk: workflows, jobs and workers in TypeScript / JavaScript over
// Trellis' worker protocol, and a client of its HTTP API.
export { defineWorkflow, defineJob } from './workflow.js';
export { Worker, SDK_VERSION } from './worker.js';
export { Client } from './client.js';
export { WorkflowContext, RunUnwound } from './run.js';
export {
  TrellisError, NonRetryableError, StepError, CancelledError, DeadlineExceededError, StepTimeoutError,
  EventTimeoutError, ApprovalTimeoutError, ChildError, MapError, NonDeterminismError, ApiError, RunFailedError,
} from './errors.js';
