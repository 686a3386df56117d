"""Provider wire formats <-> pager's provider-neutral view of a history.

Each format module validates a request's messages (raising ``MessageError``
with the offending index) and classifies messages into pages. The planner
never sees a provider format; the facade renders plans back with the same
module.
"""
