"""ctxd-client: post what your agent did to ctxd and get its next model request.

Sync (:class:`Session`, :class:`Client`) and async (:class:`AsyncSession`,
:class:`AsyncClient`) on httpx; retries (tenacity) re-send the same event ids and message
positions, so a retry is never applied twice.

    from ctxd_client import Session
    session = Session.create(goal="Fix the parser", tools=TOOLS)
    session.post(messages)                       # the OpenAI history as the agent keeps it
    reply = llm.chat.completions.create(**session.request().openai_kwargs())
"""

from ctxd_client._async import AsyncClient, AsyncSession
from ctxd_client._core import (
                               AssembledRequest,
                               ConflictError,
                               CtxdError,
                               InvalidInputError,
                               NotFoundError,
                               RecallArgumentsError,
                               RetryableError,
                               RetryPolicy,
)
from ctxd_client._sync import Client, Session

__all__ = ["AssembledRequest", "AsyncClient", "AsyncSession", "Client", "ConflictError", "CtxdError",
           "InvalidInputError", "NotFoundError", "RecallArgumentsError", "RetryPolicy", "RetryableError", "Session"]
__version__ = "0.1.0"
