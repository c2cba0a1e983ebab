"""A Mooncake trace replayed on its timestamps: each request sent when it is due, its prompt made to its input length.

    locust -f locustfiles/trace.py --host URL --trace trace.jsonl [--speed 2] [--block-tokens 512] --headless

Requests sharing a hash id share that block's text exactly (the engine's prefix cache sees what production saw),
and nothing is shared with an earlier run. Each record keeps when it was due and how late it left (send_lag_s).
"""

from locustfiles import llm_run
from locustfiles.shapes.trace import TraceShape
from locustfiles.users.traffic import TraceUser


class Replay(TraceShape):
    users = {"rate": TraceUser}


llm_run.install()
