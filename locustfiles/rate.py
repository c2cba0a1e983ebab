"""An open loop: requests sent when they fall due, whatever the server does, at one rate or a sweep of rates.

    locust -f locustfiles/rate.py --host URL --rate 4 [--arrivals poisson] [--duration 60]      # one rate
    locust -f locustfiles/rate.py --host URL --rates auto --slo ttft_p95=1.0 --headless          # a sweep

The send times are drawn once (bench_tasks.arrivals) and handed to a pool of users as they fall due
(bench_tasks.open_loop), on the master's clock; each record keeps when it was due. In the web UI, give
the rate and the arrivals in the start form (with --rates, a sweep; without --duration or --requests,
one rate runs until stopped).
"""

from locustfiles import llm_run
from locustfiles.shapes.rate import RateShape
from locustfiles.users.rate import RateUser


class Rate(RateShape):
    users = {RateUser.scenario: RateUser}


llm_run.install()
