"""The application's state: one typed object built by the lifespan (app/main.py) and kept
on the app as ``app.state.ctxd``; the API hands its parts to routes through typed
dependencies (app/api/deps.py), and services receive the parts they use as arguments.

It holds what lives as long as a worker serves: the database engine and its session
factories, the profiles and their meters, the caches (assembly memo, shell inference
states, segment token cache, session owners), the clients (rate limiter, summarizer HTTP
client) and the jobs run after a POST (payload counter, plan warmer, summarizer jobs).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session as OrmSession
from sqlalchemy.orm import sessionmaker

from app.caches import SessionOwners
from app.services.memo import AssemblyMemo
from app.services.payload_counts import Activity, PayloadCounter
from app.services.ratelimits import TenantRateLimiter
from app.services.requests import PassDue, PlanWarmer
from app.services.shell_inference import ShellStates
from app.services.summarizer import CandidateStore, SummarizerConfig, SummaryJobs
from app.settings import Settings
from app.tokenizers.loading import MeterRegistry
from app.tokenizers.profiles import ProfileRegistry

if TYPE_CHECKING:
    import httpx
    from itsdangerous import URLSafeTimedSerializer

    from app.tokenizers.segments import TokenCache


@dataclass(eq=False)
class AppState:
    """What a worker holds while it serves (module docstring). Mutable: tests swap a part
    (a dead database, a rate limiter, the compaction override)."""

    settings: Settings
    engine: Engine
    #: one transaction per unit of work (writes)
    session_factory: sessionmaker[OrmSession]
    #: snapshot reads, no write lock (app/store/db.py ``make_read_factory``)
    read_factory: sessionmaker[OrmSession]
    profiles: ProfileRegistry
    meters: MeterRegistry
    #: the segment token cache the meters count through (in process, or Redis)
    token_cache: TokenCache
    memo: AssemblyMemo
    #: the shell inference states kept between POSTs (``CTXD_SHELL_STATE_BYTES``; None when 0)
    shell_states: ShellStates | None
    rate_limiter: TenantRateLimiter
    #: requests in flight (app/api/middleware.py RequestContext): the payload counts wait for idle
    activity: Activity
    #: new tool outputs' token counts, after their POST, when this worker is idle
    payload_counter: PayloadCounter
    #: a POST's warm-up of its session's next plan (None: no warm-up)
    warmer: PlanWarmer | None
    #: the model-written record's configuration (None: no summarizer)
    summarizer: SummarizerConfig | None
    summaries: CandidateStore
    #: the summarizer jobs in flight in this worker: a pass's GET waits for its fold's
    summary_jobs: SummaryJobs
    summarizer_http: httpx.Client | None
    #: which tenant owns which session, as the API's authorization found it
    session_owners: SessionOwners
    #: the inspector's cookie signer
    ui_signer: URLSafeTimedSerializer
    #: an override of whether a compaction pass is due (app/services/requests.py PassDue): in-place
    #: tombstones wait for it. None: select's forecast from its watermarks, the default signal.
    pass_due: PassDue | None = None
    #: set once the default profile's tokenizer load ended (loaded or failed: /readyz)
    tokenizer_ready: threading.Event = field(default_factory=threading.Event)
    #: "<exception class>: <message>" when the default profile's tokenizer failed to load
    tokenizer_error: str | None = None
