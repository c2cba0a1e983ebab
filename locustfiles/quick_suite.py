"""The quick suite: chat, fresh prompts, coding agent, bursts and needles, in one Locust run.

    locust -f locustfiles/quick_suite.py --host URL            # web UI: press start, it runs itself
    locust -f locustfiles/quick_suite.py --host URL --headless # ends by itself when the suite is done
"""

from locustfiles import llm_run
from locustfiles.shapes.suite import SuiteShape
from locustfiles.users.agent import AgentUser
from locustfiles.users.burst import BurstUser
from locustfiles.users.chat import ChatQuestionUser
from locustfiles.users.needle import NeedleUser
from locustfiles.users.prompt import PromptUser


class QuickSuite(SuiteShape):
    users = {"chat": ChatQuestionUser, "prompt": PromptUser, "agent": AgentUser, "burst": BurstUser,
             "needle": NeedleUser}


llm_run.install()
