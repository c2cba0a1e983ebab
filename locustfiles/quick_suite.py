"""The quick suite: chat, fresh prompts, coding agent, bursts and needles, in one Locust run.

    locust -f locustfiles/quick_suite.py --host URL            # web UI: press start, it runs itself
    locust -f locustfiles/quick_suite.py --host URL --headless # ends by itself when the suite is done
"""

from bench_tasks import chat
from locustfiles.agent import AgentUser
from locustfiles.burst import BurstUser
from locustfiles.job_user import JobUser
from locustfiles.suite_shape import SuiteShape
from locustfiles.needle import NeedleUser
from locustfiles.prompt import PromptUser


class ChatQuestionUser(JobUser):
    """Three short questions, one at a time (the suite's chat phase)."""

    scenario = "chat"

    def run_job(self, job) -> None:
        question = chat.QUESTIONS[job.index % len(chat.QUESTIONS)]
        opening = self.opening(job.phase, job.round, job.index)
        self.stream_chat(self.job_record(job), chat.messages(question, opening), chat.MAX_TOKENS)


class QuickSuite(SuiteShape):
    users = {"chat": ChatQuestionUser, "prompt": PromptUser, "agent": AgentUser,
             "burst": BurstUser, "needle": NeedleUser}
