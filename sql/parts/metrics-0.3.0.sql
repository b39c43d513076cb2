--------------------------------------------------------------------------------
-- metrics (0.3.0): 0.2.0's function (metrics-0.2.0.sql), which reads
-- relaybus_internal.delivery_counts, runs without jit, as the reads of the lanes' windows
-- under it do (see relaybus_internal.unfinished: each call compiled its expressions first).
--------------------------------------------------------------------------------
ALTER FUNCTION relaybus.metrics() SET jit = off;
