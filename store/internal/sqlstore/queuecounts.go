package sqlstore

// QueueCounts counts the unfinished runs by namespace, queue and status
// (store.QueueCounter). Each arm names one status, so that it reads only that
// status' partial index (and the rows it points to), never the finished runs.
const QueueCounts = `SELECT namespace, queue, 'pending', count(*) FROM runs WHERE status = 'pending' GROUP BY namespace, queue
UNION ALL SELECT namespace, queue, 'running', count(*) FROM runs WHERE status = 'running' GROUP BY namespace, queue
UNION ALL SELECT namespace, queue, 'waiting', count(*) FROM runs WHERE status = 'waiting' GROUP BY namespace, queue
UNION ALL SELECT namespace, queue, 'blocked', count(*) FROM runs WHERE status = 'blocked' GROUP BY namespace, queue`
