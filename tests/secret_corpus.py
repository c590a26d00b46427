"""A corpus of realistic FAKE secrets (issue 12 item 5) as agents meet them: in tool outputs
(env dumps, .env and config files, cloud credentials, git remotes, curl commands, JSON
service-account files with escaped newlines), in assistant text and in tool-call
arguments. Every secret is made here from a fixed seed: none is a real credential.

``CORPUS``: (name, text, the secret strings that must not survive redaction).
``NEAR_MISSES``: real-looking output that must come through unchanged (hashes, UUIDs,
base64 test data, digests, code that reads secrets from the environment).
"""

from __future__ import annotations

import base64
import json
import random
import string

_rng = random.Random(12)


def _s(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


AWS_ID = "AKIA" + _s(16, string.ascii_uppercase + string.digits)
AWS_SECRET = _s(40, string.ascii_letters + string.digits + "/+")
GH_CLASSIC = "ghp_" + _s(36)
GH_FINE = "github_pat_" + _s(22) + "_" + _s(59)
GITLAB = "glpat-" + _s(20)
OPENAI = "sk-proj-" + _s(48, string.ascii_letters + string.digits + "_-")
ANTHROPIC = "sk-ant-api03-" + _s(93, string.ascii_letters + string.digits + "_-") + "AA"
GOOGLE = "AIza" + _s(35, string.ascii_letters + string.digits + "_-")
HF = "hf_" + _s(34)
SLACK = "xoxb-" + _s(12, string.digits) + "-" + _s(13, string.digits) + "-" + _s(24, string.ascii_lowercase + string.digits)
STRIPE = "sk_live_" + _s(24)
SENDGRID = "SG." + _s(22) + "." + _s(43)
JWT = (base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=") + "."
       + base64.urlsafe_b64encode(b'{"sub":"1234567890","name":"agent"}').decode().rstrip("=") + "." + _s(43))
BEARER = _s(40, string.ascii_letters + string.digits + "-._")
DB_PASSWORD = _s(6) + "#" + _s(8) + "!"
URL_PASSWORD = _s(14)
#: passwords in URL userinfo holding the punctuation userinfo allows (sub-delims, ":", "%XX")
#: and a raw "@" people leave in them (URL parsers split the authority at the last "@")
URL_PUNCT = [_s(6) + "!" + _s(3) + "$" + _s(4), _s(5) + ":" + _s(7), _s(4) + "&" + _s(3) + "=" + _s(5) + ";",
             _s(6) + "'" + _s(2) + "(" + _s(3) + ")*+,", _s(5) + "%40" + _s(6) + "%2F", _s(6) + "@" + _s(7)]
DJANGO_SECRET = "django-insecure-" + _s(40, string.ascii_lowercase + string.digits + "!@#%^&*(-_=+)")
NPM = "npm_" + _s(36)
PYPI = "pypi-AgEIcHlwaS5vcmc" + _s(80, string.ascii_letters + string.digits + "-_")
_KEY_BODY = "\n".join(_s(64, string.ascii_letters + string.digits + "+/") for _ in range(8))
PRIVATE_KEY = f"-----BEGIN RSA PRIVATE KEY-----\n{_KEY_BODY}\n-----END RSA PRIVATE KEY-----"
OPENSSH_KEY = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{_KEY_BODY}\n-----END OPENSSH PRIVATE KEY-----"
KEY_LINES = _KEY_BODY.splitlines()

SERVICE_ACCOUNT = json.dumps({
    "type": "service_account", "project_id": "demo-project", "private_key_id": _s(40, "0123456789abcdef"),
    "private_key": f"-----BEGIN PRIVATE KEY-----\n{_KEY_BODY}\n-----END PRIVATE KEY-----\n",
    "client_email": "agent@demo-project.iam.gserviceaccount.com"}, indent=2)

CORPUS: list[tuple[str, str, list[str]]] = [
    ("env dump", (f"HOME=/root\nPATH=/usr/bin\nAWS_ACCESS_KEY_ID={AWS_ID}\nAWS_SECRET_ACCESS_KEY={AWS_SECRET}\n"
                 f"GITHUB_TOKEN={GH_CLASSIC}\nOPENAI_API_KEY={OPENAI}\nHF_TOKEN={HF}\nLANG=C.UTF-8\n"),
     [AWS_ID, AWS_SECRET, GH_CLASSIC, OPENAI, HF]),
    (".env file", (f"# local settings\nDATABASE_URL=postgres://app:{URL_PASSWORD}@db:5432/app\nDB_PASSWORD={DB_PASSWORD}\n"
                  f"STRIPE_SECRET_KEY={STRIPE}\nSENDGRID_API_KEY={SENDGRID}\nANTHROPIC_API_KEY={ANTHROPIC}\n"),
     [URL_PASSWORD, DB_PASSWORD, STRIPE, SENDGRID, ANTHROPIC]),
    ("aws credentials", f"[default]\naws_access_key_id = {AWS_ID}\naws_secret_access_key = {AWS_SECRET}\nregion = eu-west-1\n",
     [AWS_ID, AWS_SECRET]),
    ("git remote", (f"origin\thttps://x-access-token:{GH_CLASSIC}@github.com/org/repo.git (fetch)\n"
                   f"gitlab\thttps://oauth2:{GITLAB}@gitlab.com/org/repo.git (push)\n"), [GH_CLASSIC, GITLAB]),
    ("curl verbose", (f"> GET /v1/models HTTP/1.1\n> Host: api.example.com\n> Authorization: Bearer {BEARER}\n"
                     "> Accept: */*\n< HTTP/1.1 200 OK\n"), [BEARER]),
    ("private key file", f"$ cat ~/.ssh/id_rsa\n{PRIVATE_KEY}\n$ ls\n", [*KEY_LINES]),
    ("openssh key cut off", f"$ head -c 300 ~/.ssh/id_ed25519\n{OPENSSH_KEY[:300]}", [*(line for line in KEY_LINES if line in OPENSSH_KEY[:300])]),
    ("service account json", f"$ cat sa.json\n{SERVICE_ACCOUNT}\n", [*KEY_LINES]),
    ("settings.py", f"DEBUG = True\nSECRET_KEY = '{DJANGO_SECRET}'\nALLOWED_HOSTS = []\n", [DJANGO_SECRET]),
    ("npmrc and pypirc", f"//registry.npmjs.org/:_authToken={NPM}\n[pypi]\nusername = __token__\npassword = {PYPI}\n",
     [NPM, PYPI]),
    ("slack and google", f"slack: {SLACK}\nmaps key {GOOGLE} in config.js\n", [SLACK, GOOGLE]),
    ("jwt in a log line", f"2024-05-01 INFO auth ok token={JWT} user=agent\n", [JWT]),
    ("github fine-grained", f"export GH_PAT={GH_FINE}\n", [GH_FINE]),
    ("url userinfo punctuation", "\n".join([
        f"DATABASE_URL=postgres://app:{URL_PUNCT[0]}@db.internal:5432/app",
        f"redis://default:{URL_PUNCT[1]}@cache:6379/0",
        f"amqp://svc:{URL_PUNCT[2]}@rabbit.example.com/vhost",
        f"export MONGO=mongodb+srv://admin:{URL_PUNCT[3]}@cluster0.example.net/db?retryWrites=true",
        f"mysql://root:{URL_PUNCT[4]}@localhost/db",
        f"  remote: https://deploy:{URL_PUNCT[5]}@git.example.com/org/repo.git"]), URL_PUNCT),
]

#: Assistant message text and tool-call arguments holding secrets (arguments are JSON).
ASSISTANT_TEXT = (f"I found the key in the env: {AWS_ID} with secret {AWS_SECRET}; I will not print it again.",
                  [AWS_ID, AWS_SECRET])
ARGUMENTS: list[tuple[str, list[str]]] = [
    (json.dumps({"command": f"curl -H 'Authorization: Bearer {BEARER}' https://api.example.com/v1/models"}), [BEARER]),
    (json.dumps({"command": f"echo 'AWS_SECRET_ACCESS_KEY=\"{AWS_SECRET}\"' >> .env"}), [AWS_SECRET]),
    (json.dumps({"path": ".env", "content": f"GITHUB_TOKEN={GH_CLASSIC}\nDB_PASSWORD={DB_PASSWORD}\nDEBUG=1\n"}),
     [GH_CLASSIC, DB_PASSWORD]),
    (json.dumps({"path": "sa.json", "content": SERVICE_ACCOUNT}), [*KEY_LINES]),
    (json.dumps({"command": f"git clone https://x:{GH_CLASSIC}@github.com/o/r.git"}, ensure_ascii=False), [GH_CLASSIC]),
]

NEAR_MISSES: list[str] = [
    "commit 3f786850e387550fdab836ed7e6dc881de23001b\nAuthor: Dev <dev@example.com>\n",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08  ubuntu:22.04\n",
    "request id 123e4567-e89b-12d3-a456-426614174000 took 12 ms\n",
    "data = base64.b64decode('SGVsbG8gV29ybGQhIFRoaXMgaXMgdGVzdCBkYXRhIGZvciB0aGUgcGFyc2VyLg==')\n",
    "django==4.2.1 --hash=sha256:a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90\n",
    "password = os.environ['DB_PASSWORD']\ntoken = get_token(user)\nsecret_key = settings.SECRET_KEY\n",
    "max_tokens=4096 tokenizer: Qwen/Qwen3-8B access_key_id=None password=changeme token=${GITHUB_TOKEN}\n",
    "def check_password(self, raw_password):\n    return check(raw_password, self.password)\n",
    "  File \"/usr/lib/python3/site-packages/requests/auth.py\", line 42, in __call__\n",
    "tests/test_auth.py::test_bearer_token PASSED\ntests/test_auth.py::test_basic_auth PASSED\n",
    "md5: d41d8cd98f00b204e9800998ecf8427e\n",
    "https://github.com/psf/requests/blob/main/src/requests/auth.py#L42\n",
]
