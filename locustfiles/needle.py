"""Needle in a haystack: is the code word hidden at 10/50/90% of a long prompt found?

    locust -f locustfiles/needle.py --host URL --needle-sizes 32k,128k
"""

from locustfiles import llm_run
from locustfiles.shapes.suite import SuiteShape
from locustfiles.users.needle import NeedleUser


class NeedleShape(SuiteShape):
    users = {"needle": NeedleUser}


llm_run.install()
