"""What the tests share, each in one place; the benchmarks use `timing` and `mlflow_server` too.

- `targets`: fake targets, healthy or misbehaving;
- `sinks`: fake sinks, a TorchRL-shaped logger and an alert notifier that keep what they get;
- `hostile`: user code raising BaseExceptions or swallowing its cancellation, and ways to run it bounded;
- `checks`: waiting until a condition holds, the monitor's logged warnings, a JSONL file read while it is written;
- `network`: a real HTTP receiver on 127.0.0.1, a free port, a Prometheus scrape, a user's own network sink;
- `mlflow_server`: a real MLflow tracking server;
- `timing`: a target that notes when it is polled, and the share of poll slots kept;
- `terminal`: a command on a real pseudo-terminal;
- `cli`: ``monitor-async`` run as a child process;
- `rank_worker`: one rank of a real gloo job, run as a script.
"""
