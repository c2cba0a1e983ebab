"""Fresh long prompts, one at a time: how fast does the server read a prompt it has never seen?

    locust -f locustfiles/prompt.py --host URL --sizes 4k,16k,32k --runs 3
"""

from locustfiles import llm_run
from locustfiles.shapes.suite import SuiteShape
from locustfiles.users.prompt import PromptUser


class PromptShape(SuiteShape):
    users = {"prompt": PromptUser}


llm_run.install()
