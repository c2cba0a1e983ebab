"""A coding agent: six turns with four tools, resending the whole growing conversation each turn (agent.py)."""

from bench_tasks import agent, cache_share
from locustfiles.users.job_user import JobUser


class AgentUser(JobUser):
    scenario = "agent"

    def run_job(self, job) -> None:
        session = agent.Session.start(self.opening(job.phase, job.round))
        resent = cache_share.Conversation()  # each turn may share what the session sent before

        def judge(record, recorder) -> None:
            judge_tool_call(record, recorder)
            resent.judge(record)

        for turn in range(1, agent.TURNS + 1):
            record = self.job_record(job, turn=turn)
            recorder = self.stream_chat(record, session.turn_messages(), agent.MAX_TOKENS, tools=session.tools,
                                        judge=judge)
            if not record.ok:
                return  # a broken conversation cannot go on; the failed turn is recorded
            session.answered(recorder.answer_text, recorder.tool_calls)


def judge_tool_call(record, recorder) -> None:
    calls = recorder.tool_calls
    if calls:
        record.tool_name = calls[0]["name"]
        record.tool_call_valid = agent.validate(calls[0])
