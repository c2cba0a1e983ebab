"""Bursts: N people press enter at the same moment. Connections are open beforehand and all N
requests are released by one barrier; each asks for 128 tokens.

    locust -f locustfiles/burst.py --host URL --bursts 1,4,12 --runs 3
"""

from locustfiles import llm_run
from locustfiles.shapes.suite import SuiteShape
from locustfiles.users.burst import BurstUser


class BurstShape(SuiteShape):
    users = {"burst": BurstUser}


llm_run.install()
