-- The namespace default has a record from the start, with the implicit defaults
-- (runs kept 30 days, default queue "default", no payload limit), so that queues
-- can be created in it and it is listed without a "namespaces create default"
-- first. Runs in a namespace without a record keep the same defaults.
INSERT INTO namespaces (name, retention, default_queue, payload_limit, created_at, updated_at)
VALUES ('default', 2592000000000000, 'default', 0, now(), now())
ON CONFLICT DO NOTHING;
