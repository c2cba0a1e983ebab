"""The classroom workload without Locust: think times, arrivals, conversations resent whole, and a teacher's
file of questions as the class's lessons."""

from __future__ import annotations

import random

import pytest

from bench_tasks import classroom
from bench_tasks.traffic.dataset import Dataset
from tests.traffic_files import sharegpt, write_jsonl


def test_think_time_parses_a_range_or_one_value_and_draws_inside_it():
    assert classroom.parse_think_time("10-40") == classroom.ThinkTime(10.0, 40.0)
    assert classroom.parse_think_time("1.5") == classroom.ThinkTime(1.5, 1.5)
    for bad in ("", "ten", "40-10", "1-2-3"):
        with pytest.raises(ValueError):
            classroom.parse_think_time(bad)
    rng, think = random.Random(1), classroom.ThinkTime(10.0, 40.0)
    draws = [think.draw(rng) for _ in range(500)]
    assert 10.0 <= min(draws) < 12.0 and 38.0 < max(draws) <= 40.0
    arrivals = [think.arrival(rng) for _ in range(500)]
    assert 0.0 <= min(arrivals) < 2.0 and 38.0 < max(arrivals) <= 40.0


def test_a_student_arrives_then_thinks_and_resends_the_whole_conversation():
    student = classroom.Student(classroom.ThinkTime(2.0, 2.0), seed=7, name="student 7")
    assert not student.arrived
    assert 0.0 <= student.pause_s() <= 2.0 and student.arrived  # the arrival delay comes first
    assert student.pause_s() == 2.0  # then the think time
    questions = classroom.TOPICS[7 % len(classroom.TOPICS)]
    first = student.messages()
    assert [m["role"] for m in first] == ["system", "user"] and first[1]["content"] == f"I'm student 7. {questions[0]}"
    assert (student.conversation, student.turn) == (1, 1)
    student.answered(first, "Plants make food from light.")
    second = student.messages()
    assert [m["content"] for m in second[1:]] == [first[1]["content"], "Plants make food from light.", questions[1]]
    assert student.turn == 2
    student.messages()  # a failed answer: nothing is recorded, the same question comes again
    assert student.messages() == second
    for turn in range(2, len(questions) + 1):
        student.answered(student.messages(), f"answer {turn}")
    assert (student.conversation, student.turn) == (2, 1)  # after the topic's last question: a new one
    assert student.messages()[1]["content"] == "I'm student 7. " + classroom.TOPICS[(7 + 1) % len(classroom.TOPICS)][0]



def test_a_class_asks_a_teachers_file_in_order_each_lesson_with_the_students_own_answers(tmp_path):
    path = write_jsonl(tmp_path / "term.jsonl", [sharegpt(1, turns=2, system="You are a maths tutor.")])
    prompts = write_jsonl(tmp_path / "questions.jsonl", [
        {"prompt": "What is a prime number?", "max_tokens": 30},
        {"messages": [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Hi"}]}])
    think = classroom.ThinkTime(1.0, 1.0)
    lessons = classroom.FileLessons(Dataset.open(str(path)))
    ann, bob = (classroom.Student(think, seed=n, name=name, lessons=lessons) for n, name in enumerate("ab"))
    first = ann.messages(opening="[m c]")
    assert first == [{"role": "system", "content": "[m c] You are a maths tutor."},
                     {"role": "user", "content": "Question 1 of conversation 1: why is the sky blue?"}]
    assert ann.lesson.source == f"{path}:1" and bob.lesson.source == f"{path}:1" and lessons.passes == 2  # read again
    ann.answered(first, "My own answer.")
    assert ann.messages()[2:] == [{"role": "assistant", "content": "My own answer."},
                                  {"role": "user", "content": "Question 2 of conversation 1: why is the sky blue?"}]
    ann.answered(ann.messages(), "Done.")
    assert (ann.conversation, ann.turn, lessons.passes) == (2, 1, 3)  # the lesson is over: the file's next
    questions = classroom.FileLessons(Dataset.open(str(prompts)))
    cy = classroom.Student(think, seed=3, name="c", lessons=questions)
    asked = cy.messages(opening="[m c]")
    assert asked[1] == {"role": "user", "content": "What is a prime number?"} and cy.lesson.max_tokens == 30
    cy.answered(asked, "A number with two divisors.")
    assert cy.turn == 1 and cy.messages(opening="[m d]") == [  # a {"messages"} line: one request, as it is
        {"role": "system", "content": "[m d] Answer in French."}, {"role": "user", "content": "Hi"}]


def test_a_share_of_questions_carries_a_pasted_document_that_stays_in_the_conversation():
    think = classroom.ThinkTime(1.0, 3.0)
    plain, same = classroom.Student(think, seed=3, name="s"), classroom.Student(think, seed=3, name="s", paste_share=0)
    assert [plain.pause_s() for _ in range(20)] == [same.pause_s() for _ in range(20)]  # no pastes: as before
    assert not any(same.pastes() for _ in range(50))
    student = classroom.Student(think, seed=3, name="s", paste_share=0.3)
    share = sum(student.pastes() for _ in range(2000)) / 2000
    assert 0.25 < share < 0.35
    question = student.messages("[doc 1] Here is a document.")
    assert question[-1]["content"].startswith("[doc 1] Here is a document.\n\nI'm s. ")
    student.answered(question, "An answer.")
    assert student.messages()[1]["content"].startswith("[doc 1]")  # resent with the conversation, as a chat page does
    with pytest.raises(ValueError):
        classroom.Student(think, seed=3, name="s", paste_share=1.5)
