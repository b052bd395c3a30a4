"""Sample conversations for the chat-template and loss-mask parity tests."""

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city — in °C, with \"quotes\" & <tags>",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7, "default": 1},
                "threshold": {"type": "number", "default": 0.5},
                "metric": {"type": "boolean", "default": True},
                "tags": {"type": "array", "items": {"type": "string"}},
                "extra": {"type": ["string", "null"]},
            },
            "required": ["city"],
        },
    },
}

MUL_TOOL = {
    "type": "function",
    "function": {
        "name": "multiply",
        "description": "Multiplies two numbers",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                       "required": ["a", "b"]},
    },
}

# (name, messages, tools)
CONVERSATIONS = [
    ("single_turn", [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "Paris."},
    ], None),
    ("system", [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Say hi."},
        {"role": "assistant", "content": "Hi."},
    ], None),
    ("multi_turn", [
        {"role": "system", "content": "Answer in one word."},
        {"role": "user", "content": "Colour of the sky?"},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "And grass?"},
        {"role": "assistant", "content": "Green."},
        {"role": "user", "content": "Snow?"},
        {"role": "assistant", "content": "White."},
    ], None),
    ("whitespace_and_unicode", [
        {"role": "user", "content": "  Grüße 👋 — 日本語?\n\n"},
        {"role": "assistant", "content": "\n  こんにちは! مرحبا 🙂  \n"},
    ], None),
    ("tools_dict_arguments", [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Zürich for 2 days?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather",
                                              "arguments": {"city": "Zürich", "days": 2, "threshold": 1.5,
                                                            "metric": True, "tags": ["a", "b"], "extra": None}}}]},
        {"role": "tool", "name": "get_weather", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 21.5 °C and clear."},
    ], [WEATHER_TOOL]),
    ("tools_string_arguments_parallel", [
        {"role": "user", "content": "2*3 and 4*5?"},
        {"role": "assistant", "content": "Let me compute.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "multiply", "arguments": "{\"a\": 2, \"b\": 3}"}},
            {"id": "call_2", "type": "function", "function": {"name": "multiply", "arguments": "{\"a\": 4, \"b\": 5}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "6"},
        {"role": "tool", "tool_call_id": "call_2", "content": "20"},
        {"role": "assistant", "content": "6 and 20."},
    ], [MUL_TOOL, WEATHER_TOOL]),
    ("tool_then_new_question", [
        {"role": "user", "content": "2*3?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "multiply", "arguments": {"a": 2, "b": 3}}}]},
        {"role": "tool", "content": "6"},
        {"role": "assistant", "content": "6."},
        {"role": "user", "content": "Thanks!"},
        {"role": "assistant", "content": "You're welcome."},
    ], [MUL_TOOL]),
    ("reasoning", [
        {"role": "user", "content": "Is 7 prime?"},
        {"role": "assistant", "content": "<think>\nIt has no divisors but 1 and 7.\n</think>\n\nYes."},
    ], None),
    ("reasoning_field", [
        {"role": "user", "content": "Is 9 prime?"},
        {"role": "assistant", "content": "No.", "reasoning_content": "9 = 3 * 3."},
    ], None),
    ("null_fields", [
        {"role": "user", "content": "Hi", "name": None},
        {"role": "assistant", "content": "Hello", "tool_calls": None},
    ], None),
]

# Conversations that end with a user message, for add_generation_prompt.
PROMPTS = [
    ("prompt", [{"role": "user", "content": "Tell me a joke."}], None),
    ("prompt_with_system_and_tools", [
        {"role": "system", "content": "Be helpful."},
        {"role": "user", "content": "Weather in Paris?"},
    ], [WEATHER_TOOL]),
    ("prompt_after_tool", [
        {"role": "user", "content": "2*3?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "multiply", "arguments": {"a": 2, "b": 3}}}]},
        {"role": "tool", "content": "6"},
    ], [MUL_TOOL]),
]
