-- summary.lua: prints one machine-readable line when wrk is done, with exact figures
-- (latencies in microseconds) instead of wrk's rounded text report.

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d status_errors=%d connect_errors=%d read_errors=%d " ..
    "write_errors=%d timeouts=%d p50_us=%d p99_us=%d mean_us=%.1f\n",
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.mean))
end
