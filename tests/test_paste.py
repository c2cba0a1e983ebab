"""When the pasting user sends its paste: once a chat answer streams, or at once when they are too short to catch."""

from bench_tasks.paste import STREAMING_MARGIN_S, Chats


def test_an_answer_is_streaming_once_it_has_been_out_twice_its_users_last_first_token_and_a_margin():
    chats = Chats()
    chats.asked("a", t_sent=10.0, previous_ttft_s=0.1, previous_e2e_s=2.0)
    chats.asked("b", t_sent=10.0, previous_ttft_s=None)  # its first question: nothing to go by
    assert not chats.streaming(10.0 + 0.2 + STREAMING_MARGIN_S - 0.001)
    assert chats.streaming(10.0 + 0.2 + STREAMING_MARGIN_S + 0.001)
    assert not chats.too_short_to_catch()
    chats.answered("a")
    assert not chats.streaming(20.0) and not chats.too_short_to_catch()


def test_answers_that_end_before_they_would_count_as_streaming_are_too_short_to_wait_for():
    chats = Chats()
    assert not chats.too_short_to_catch()  # nobody chatting: the paste waits (at most its limit)
    # Cut by a stop string after a few tokens: each answer ended 40 ms after it was sent, 5 ms to its first token.
    chats.asked("a", t_sent=10.0, previous_ttft_s=0.005, previous_e2e_s=0.040)
    chats.asked("b", t_sent=10.01, previous_ttft_s=0.005, previous_e2e_s=0.045)
    assert chats.too_short_to_catch()
    chats.asked("c", t_sent=10.02, previous_ttft_s=0.005, previous_e2e_s=1.5)  # one that lasts: wait for it
    assert not chats.too_short_to_catch()
