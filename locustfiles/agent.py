"""A coding agent: six turns with four tools, resending the whole growing conversation each turn.

    locust -f locustfiles/agent.py --host URL --runs 3
"""

from locustfiles import llm_run
from locustfiles.shapes.suite import SuiteShape
from locustfiles.users.agent import AgentUser


class AgentShape(SuiteShape):
    users = {"agent": AgentUser}


llm_run.install()
