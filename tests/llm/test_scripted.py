"""The scripted provider: the n-th assistant turn gets the n-th response."""

from __future__ import annotations

import anyio
import pytest

from runner.llm import LLMError, LLMRequest, Message, RequestedCall, ScriptedLLM

SCRIPT = [
    {"text": "asking", "tool_calls": [{"name": "t", "arguments": {"a": 1}}]},
    {"text": "got {{result:call_0_0}} and {{result:missing}}"},
]


def test_replays_by_turn_and_fills_results():
    llm = ScriptedLLM(SCRIPT)
    first = anyio.run(llm.complete, LLMRequest("", (Message("user", "go"),)))
    assert first.tool_calls == (RequestedCall("call_0_0", "t", {"a": 1}),)
    history = (Message("user", "go"), Message("assistant", "asking", first.tool_calls),
               Message("tool", "42", tool_call_id="call_0_0"))  # fmt: skip
    second = anyio.run(llm.complete, LLMRequest("", history))
    assert second.text == "got 42 and {{result:missing}}" and second.tool_calls == ()
    again = anyio.run(llm.complete, LLMRequest("", history))
    assert again == second


def test_running_out_of_script_is_an_error():
    llm = ScriptedLLM([{"text": "only"}])
    history = (Message("user", "a"), Message("assistant", "only"), Message("user", "b"))
    with pytest.raises(LLMError, match="1 response"):
        anyio.run(llm.complete, LLMRequest("", history))


@pytest.mark.parametrize("bad", [{"txt": "x"}, {"tool_calls": [{"arguments": {}}]},
                                 {"tool_calls": [{"name": "t", "arguments": []}]}])  # fmt: skip
def test_bad_scripts_are_refused(bad):
    with pytest.raises(ValueError, match=r"responses\[0\]"):
        ScriptedLLM([bad])


def test_closing_a_script_releases_nothing_and_it_keeps_replaying():
    async def main():
        async with ScriptedLLM([{"text": "still here"}]) as llm:
            pass
        await llm.aclose()
        return await llm.complete(LLMRequest("", (Message("user", "go"),)))

    assert anyio.run(main).text == "still here"


def test_a_request_extending_the_last_one_is_counted_from_where_it_left_off():
    llm = ScriptedLLM([{"text": f"turn {i}"} for i in range(4)])
    user = Message("user", "go")
    first = (user, Message("assistant", "a"), Message("user", "b"))
    assert anyio.run(llm.complete, LLMRequest("", first)).text == "turn 1"
    longer = (*first, Message("assistant", "c"), Message("user", "d"))
    assert anyio.run(llm.complete, LLMRequest("", longer)).text == "turn 2"
    # The same first message, then something else: counted again from the start.
    other = (user, Message("user", "b"))
    assert anyio.run(llm.complete, LLMRequest("", other)).text == "turn 0"
    assert anyio.run(llm.complete, LLMRequest("", longer)).text == "turn 2"
