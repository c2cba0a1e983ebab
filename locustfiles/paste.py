"""One person pastes long documents while the others chat: do the streaming answers pause, and why?

    locust -f locustfiles/paste.py --host URL -u 5 --paste-size 4k    # 4 chatting, 1 pasting (fixed_count)

The chatting users ask fresh questions back to back; the pasting user sends fresh prompts of
--paste-size tokens back to back (phase ``paste-4k``), each once an answer is streaming. After
--requests pastes (without it: until stopped) the chats finish their answers and, in a local run, the
run ends. The report's stalls table names, for each pause of a chat's stream, the paste it read.
"""

from locustfiles import llm_run
from locustfiles.users.paste import PasteChatUser, PasteUser  # noqa: F401 - what Locust runs

llm_run.install()
