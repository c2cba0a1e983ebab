"""One person chatting: short questions, one at a time, each answer streamed and measured.

    locust -f locustfiles/chat.py --host http://127.0.0.1:8000

With --requests N the run ends after N answers in all; the engine's counters are read as it starts and stops.
"""

from locustfiles import engine_counters, llm_run
from locustfiles.users.chat import ChatUser  # noqa: F401 - what Locust runs

llm_run.install(engine_counters.AroundEachRun("chat"))
