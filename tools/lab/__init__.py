"""The lab: the maintainers' comparison and one-off experiments, not part of the product. Run from
the repository root (`python -m tools.lab.NAME`).

The comparison (`make bench-lab`):
- bench (with bench_peers and bench_report): Tandem beside llama-cpp-python's prompt lookup,
  llama.cpp's llama-lookup and llama-server's n-gram kinds, whole processes (a first use and
  warmed), a request asked again, the ceiling; the user's own question is `tandem bench`.
- models: the lab's models made from the embedded one, by name (`default-f16`, `default-costly`).
- replay: the draft policy on kept replies (resources/replay) against any machine's cost curve,
  the hindsight-best beside it; measures a curve here (`cost-curve`, `--standin` for a real
  size) and records replies (`record-traces`). The simulation itself is engine/replay.py (the pair
  doctor's copy-work figure runs it).
- shapes: stand-ins of a known shape (a config.json's), for `--standin` and the experiments
  below; the product's are planned from a real file's header only.

The experiments each answered one question once; kept to re-run. What each answered:

- batch_invariance: whether a verify batch computes plain decoding's rows, and whether deciding
  a near-tie row again by a one-row decode gives plain's token (issue 35): no and no; rows
  identical at every batch size need four llama.cpp settings that cost a plain token 40-60%
  (docs/findings.md, "Verifying drafts").
- documents_sampling: what the chat's sampling (temperature 0.7, repetition penalty 1.1) does to
  copying an attached document (issue 25): the "Edit or copy text" preset (temperature 0, no
  penalty) stays the default for copy work; sparing the documents' tokens from the penalty did
  not help and stays off (docs/user/documents.md).
- documents_ttft: whether n-gram drafting delays the first token with a long attachment
  (issue 25): indexing a 3,338-token prompt took about 1.4% of the prefill it follows.
- load_drill: whether `tandem serve` loses a reply under many clients (issue 28): 79,887 requests
  in 180 s, none lost, memory flat (docs/trust.md; tests/integration/test_load_drill.py runs a short one).
- http_bench: what the HTTP path costs against the same work in process: 1.03-1.04x plain,
  0.91-1.01x with n-gram speculation (docs/lab-notebook.md).
- reading_progress: how honest a long prompt's progress is (issue 51): the engine's time left past
  20% of a 1.5B stand-in's 2,047-token reading, median -5% (worst -14%) at a steady load, -21%
  (worst +36%) while others' tests changed the speed 3x; the window's line every 250 ms never
  said more read than the engine's next count (docs/findings.md).
- replay_risk_bound: how much of the gap to the hindsight-best the per-reply risk limit itself
  takes: a policy within it reaches 96-98% on every kept curve, 92.7% on the slow AVX2 EPYC's
  (docs/history/2026-12-05-night-timing-batches-while-idle.md; tests/integration/test_replay.py).
- replay_used_folder: whether a cost cache warmed by mixed work and a Python copy prices a later
  pure copy slower (issue 48): the chain replayed copies at x1.000 of a clean folder (median,
  lowest x0.974); with the departures a real folder held (2 breaks in 1.2), x0.993 (lowest
  x0.933), x1.000 (lowest x0.981) once carried departures price copies at alpha 1 at worst
  (docs/design-engine.md; tests/integration/test_replay.py).
- rpc_latency.sh (with rpc_latency_util and delay_proxy): speculation over llama.cpp RPC with
  0-5 ms of network latency added: n-gram 2.06x at 0 ms, a draft model kept local 0.99x
  (docs/lab-notebook.md).
- standin_timings: what real sizes cost here (issue 39): full cost curves of Qwen2.5-shaped
  stand-ins (0.5B 17.6 ms a token to 7B 126.9 ms), the 7B pair measured in 52.6 s, Cancel in
  0.76 s (docs/benchmarks/2026-12-06-standins.md).
- stop_reading: how long a Stop takes while a prompt is read (issue 51): a Qwen2.5 1.5B stand-in's
  128-row chunk ran to its end (median 1,297-2,276 ms, worst 3,540 ms) before llama.cpp's abort
  callback, 5-16 ms after; a 7B one 5.9-10.7 s before, 6 ms (worst 38 ms) after, on the busy
  2-core machine (docs/findings.md; tests/engine/test_stop_reading.py).
- trace_reply: why a warmed `tandem generate` copied slower than a first use (issue 35): one
  reply's steps in either state; a batch that grew llama.cpp's logits buffer priced its size
  (docs/history/2026-12-06-late-warmed-slower-than-first-use.md).
- version_switch: how long switching versions of a 2,000-token reply takes (issue 51): median
  23 ms over 10 switches (the first three 50-70 ms) on the shared 2-core machine at load 6.
"""
