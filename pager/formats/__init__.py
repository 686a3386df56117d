"""Provider wire formats <-> pager's neutral messages (``pager.core.messages``).

``base`` defines the ``WireFormat`` protocol and the registry; each built-in
format is a module that registers itself when imported here. The planner never
sees a provider format: the facade converts with the request's format on the
way in and renders with it on the way out.
"""

from pager.formats import base, openai_chat  # noqa: F401  (registers openai-chat)
# registered after chat: detection tries the newest format first
from pager.formats import anthropic_messages, openai_responses  # noqa: F401,E402

__all__ = ["anthropic_messages", "base", "openai_chat", "openai_responses"]
