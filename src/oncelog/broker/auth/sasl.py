"""SASL on one connection (issue 18): the state machine and the mechanisms. Pure: no sockets.

Theory of operation. On a SASL listener (SASL_PLAINTEXT, SASL_SSL) a connection starts
unauthenticated. It may send ApiVersions (any number) and then one SaslHandshake (17) naming a
mechanism; then the mechanism's tokens, each in a SaslAuthenticate (36) request (KIP-152:
handshake v1), or, after a handshake v0, as bare size-prefixed frames without a Kafka header
(Kafka's pre-1.0 framing, still served). When the mechanism succeeds the connection is
authenticated as ``User:<name>`` and every API is open to it. Anything else before that (another
API, a second handshake, a token before the handshake) is ``IllegalSaslState``: the server closes
the connection. A failed exchange is ``AuthenticationFailed``: the client gets
SASL_AUTHENTICATION_FAILED, after ``connection.failed.authentication.delay.ms``, and the
connection is closed. ``TRANSITIONS`` is the whole state machine; a diagram can be drawn from it.
A KIP-368 re-authentication (``connections.max.reauth.ms``) is a fresh session on the same
connection, limited to the first mechanism (server.py checks it names the same user).

Mechanisms. SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802/7677) are run by the ``scramp``
library against the credential store (credentials.py). PLAIN (RFC 4616) checks the password
against the same store: the salted password is computed with the user's stored salt and
iteration count and its stored key compared (constant time) with the stored one, so one
``oncelog users add`` serves both mechanisms and no password is kept anywhere (Kafka's PLAIN
reads ``user_NAME="password"`` from a JAAS file instead; oncelog has no JAAS).

Hostile input (issue 26). Everything here runs on the event loop, so nothing a client sizes may
cost more than a pass over its bytes: the frame itself is at most ``sasl.server.max.receive.size``
(512 KB, connection.py), and a SCRAM client-first message is looked at here first (its user name
is cut out as Kafka's ``ScramFormatter.username`` does: ``=2C`` and ``=3D`` unescaped): a name
longer than ``MAX_USER_NAME_BYTES`` or without a credential for the mechanism fails at once, so
the SCRAM library (whose SASLprep costs about 6 µs per character: a 4 MB name froze the broker
for 8 s) only ever sees names an operator created. Nothing a client sends is echoed back: the
error message a client gets is fixed per failure (Kafka's wording), and what is logged shows at
most ``SHOWN_CHARS`` characters of a client's string (``shown``).
"""

from __future__ import annotations

import enum
import hmac
from typing import Callable

from oncelog.broker.auth.credentials import CredentialStore, derive, salted_password

__all__ = ["AuthenticationFailed", "Event", "IllegalSaslState", "MAX_USER_NAME_BYTES", "SaslSession", "State",
           "TRANSITIONS", "SUPPORTED_MECHANISMS", "shown"]

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: scramp's verdicts that mean a wrong user name or password (the rest: a malformed message):
#: ``scramp.utils.ServerError`` members, by value. scramp is imported by the first SCRAM
#: exchange, not with this module (about 50 ms of a broker's start-up, issue 19).
_BAD_CREDENTIALS = ("unknown-user", "invalid-proof")
#: No user can have a longer name: Kafka's protocol strings (AlterUserScramCredentials) stop here.
MAX_USER_NAME_BYTES = 32767
#: A client's string in a log line is cut to this many characters.
SHOWN_CHARS = 64
_SCRAM_INVALID = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"
_SCRAM_MALFORMED = "Authentication failed: malformed SCRAM message with SASL mechanism {}"
_PLAIN_INVALID = "Authentication failed: Invalid username or password"


def shown(text: str | bytes, limit: int = SHOWN_CHARS) -> str:
    """``repr`` of a client's string for a log line, cut to ``limit`` characters (plus its length
    when cut): never more than about ``limit`` + 30 characters, whatever the client sent."""
    cut = text[:limit]
    out = repr(cut)
    if len(text) > limit:
        out += f"… ({len(text)} {'bytes' if isinstance(text, bytes) else 'characters'})"
    return out


class State(enum.Enum):
    START = "start"                # ApiVersions or SaslHandshake expected
    AUTHENTICATE = "authenticate"  # handshake v1 done: SaslAuthenticate requests carry the tokens
    RAW_TOKENS = "raw_tokens"      # handshake v0 done: bare tokens, no Kafka header
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class Event(enum.Enum):
    API_VERSIONS = "api_versions"
    HANDSHAKE_V0 = "handshake_v0"
    HANDSHAKE_V1 = "handshake_v1"
    BAD_MECHANISM = "bad_mechanism"  # a handshake naming a mechanism not enabled
    AUTH_REQUEST = "auth_request"    # a SaslAuthenticate request
    RAW_TOKEN = "raw_token"          # a frame in RAW_TOKENS state
    STEP_MORE = "step_more"          # the mechanism wants another token
    SUCCESS = "success"
    FAILURE = "failure"
    OTHER_API = "other_api"


#: (state, event) -> next state. A pair not in the table is illegal (IllegalSaslState).
TRANSITIONS: dict[tuple[State, Event], State] = {
    (State.START, Event.API_VERSIONS): State.START,
    (State.START, Event.HANDSHAKE_V0): State.RAW_TOKENS,
    (State.START, Event.HANDSHAKE_V1): State.AUTHENTICATE,
    (State.START, Event.BAD_MECHANISM): State.FAILED,
    (State.AUTHENTICATE, Event.AUTH_REQUEST): State.AUTHENTICATE,
    (State.AUTHENTICATE, Event.STEP_MORE): State.AUTHENTICATE,
    (State.AUTHENTICATE, Event.SUCCESS): State.AUTHENTICATED,
    (State.AUTHENTICATE, Event.FAILURE): State.FAILED,
    (State.RAW_TOKENS, Event.RAW_TOKEN): State.RAW_TOKENS,
    (State.RAW_TOKENS, Event.STEP_MORE): State.RAW_TOKENS,
    (State.RAW_TOKENS, Event.SUCCESS): State.AUTHENTICATED,
    (State.RAW_TOKENS, Event.FAILURE): State.FAILED,
    # once authenticated, every API goes to the dispatcher (which answers a second handshake
    # with ILLEGAL_SASL_STATE, as Kafka does without re-authentication)
    (State.AUTHENTICATED, Event.OTHER_API): State.AUTHENTICATED,
    (State.AUTHENTICATED, Event.API_VERSIONS): State.AUTHENTICATED,
}


class IllegalSaslState(Exception):
    """The client sent something the state machine does not allow here (a bug or an attack):
    the connection is closed."""


class AuthenticationFailed(Exception):
    """The client's credentials were refused. ``str()`` is for the log: it names the mechanism and
    the user (cut by ``shown``), never a password or a token. ``client_message`` is what the
    client is told: fixed text, nothing the client sent (Kafka's wording)."""

    def __init__(self, log_text: str, client_message: str = "Authentication failed") -> None:
        super().__init__(log_text)
        self.client_message = client_message


class _Mechanism:
    def step(self, token: bytes) -> tuple[bytes, str | None]:
        """One client token -> (server token, the authenticated user name once done)."""
        raise NotImplementedError


class _Plain(_Mechanism):
    def __init__(self, store: Callable[[], CredentialStore]) -> None:
        self.store = store

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("PLAIN: malformed token (expected authzid NUL user NUL password)",
                                       "Authentication failed: Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, user_b, password_b = parts
        try:
            user, password, authz = user_b.decode(), password_b.decode(), authzid.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed("PLAIN: token is not UTF-8", _PLAIN_INVALID) from None
        if not user or not password:
            raise AuthenticationFailed("PLAIN: empty user name or password",
                                       "Authentication failed: username or password not specified")
        if authz and authz != user:
            raise AuthenticationFailed(f"PLAIN: user {shown(user)} may not act as authorization id {shown(authz)}",
                                       "Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        creds = self.store().any_of(user) if len(user_b) <= MAX_USER_NAME_BYTES else []
        if not creds or not self._matches(creds[0], password):
            raise AuthenticationFailed(f"invalid credentials for user {shown(user)} with SASL mechanism PLAIN",
                                       _PLAIN_INVALID)
        return b"", user

    @staticmethod
    def _matches(cred: object, password: str) -> bool:
        from oncelog.broker.auth.credentials import ScramCredential

        assert isinstance(cred, ScramCredential)
        salted = salted_password(cred.mechanism, password, cred.salt, cred.iterations)
        return hmac.compare_digest(derive(cred.mechanism, cred.salt, salted, cred.iterations).stored_key, cred.stored_key)


class _Scram(_Mechanism):
    def __init__(self, mechanism: str, store: Callable[[], CredentialStore]) -> None:
        self.mechanism = mechanism
        self.user: str | None = None

        self.store = store

        def auth_info(user: str) -> tuple[bytes, bytes, bytes, int] | None:
            self.user = user
            cred = store().get(user, mechanism)
            return None if cred is None else (cred.salt, cred.stored_key, cred.server_key, cred.iterations)

        import scramp

        self.server = scramp.ScramMechanism(mechanism).make_server(auth_info)
        self.round = 0

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        self.round += 1
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise AuthenticationFailed(f"{self.mechanism}: token is not UTF-8",
                                       _SCRAM_MALFORMED.format(self.mechanism)) from None
        try:
            if self.round == 1:
                self._check_user(text)
                self.server.set_client_first(text)
                return self.server.get_server_first().encode(), None
            if self.round == 2:
                self.server.set_client_final(text)
                return self.server.get_server_final().encode(), self.user
        except AuthenticationFailed:
            raise
        except Exception as exc:  # scramp.ScramException, or a parse error on a garbage token
            who = f"user {shown(self.user)}" if self.user else "an unknown user"
            import scramp

            known = (isinstance(exc, scramp.ScramException)
                     and getattr(exc.server_error, "value", exc.server_error) in _BAD_CREDENTIALS)
            reason = "invalid credentials" if known else "a malformed SCRAM message"
            raise AuthenticationFailed(f"{reason} for {who} with SASL mechanism {self.mechanism}",
                                       (_SCRAM_INVALID if known else _SCRAM_MALFORMED).format(self.mechanism)) from None
        raise AuthenticationFailed(f"{self.mechanism}: unexpected token after the exchange ended",
                                   _SCRAM_MALFORMED.format(self.mechanism))

    def _check_user(self, client_first: str) -> None:
        """Fail at once, before the SCRAM library, for a client-first message whose user name
        (``gs2-header n=NAME,...``) is too long to exist or has no credential for this mechanism
        (a pass over the message: cheap whatever its size). A message of another shape is left to
        the library, which refuses it (its parsing is linear too; only the name is slow)."""
        fields = client_first.split(",", 3)
        if len(fields) < 3 or not fields[2].startswith("n="):
            return
        name = fields[2][2:].replace("=2C", ",").replace("=3D", "=")
        self.user = name
        if len(name) > MAX_USER_NAME_BYTES or len(name.encode()) > MAX_USER_NAME_BYTES \
                or self.store().get(name, self.mechanism) is None:
            raise AuthenticationFailed(f"invalid credentials for user {shown(name)} with SASL mechanism {self.mechanism}",
                                       _SCRAM_INVALID.format(self.mechanism))


class SaslSession:
    """One connection's SASL state. ``enabled``: the listener's mechanisms (sasl.enabled.mechanisms).
    ``store``: returns the current credential store (read at each exchange: an alteration
    applies to the next authentication at once)."""

    def __init__(self, enabled: tuple[str, ...], store: Callable[[], CredentialStore], *, lifetime_ms: int = 0) -> None:
        """``lifetime_ms``: the session lifetime SaslAuthenticate v1+ announces (KIP-368,
        ``connections.max.reauth.ms``); 0: none."""
        self.enabled = enabled
        self.lifetime_ms = lifetime_ms
        self.store = store
        self.state = State.START
        self.mechanism: str | None = None
        self.principal: str | None = None
        self._mech: _Mechanism | None = None

    def _go(self, event: Event) -> None:
        nxt = TRANSITIONS.get((self.state, event))
        if nxt is None:
            raise IllegalSaslState(f"{event.value} is not allowed in SASL state {self.state.value}")
        self.state = nxt

    @property
    def authenticated(self) -> bool:
        return self.state is State.AUTHENTICATED

    @property
    def raw_tokens(self) -> bool:
        return self.state is State.RAW_TOKENS

    def api_versions(self) -> None:
        self._go(Event.API_VERSIONS)

    def other_api(self, name: str) -> None:
        if (self.state, Event.OTHER_API) not in TRANSITIONS:
            raise IllegalSaslState(f"{name} before SASL authentication (state {self.state.value})")
        self._go(Event.OTHER_API)

    def handshake(self, mechanism: str, version: int) -> bool:
        """SaslHandshake: True when ``mechanism`` is enabled (the state moves on); False when it
        is not (the answer is UNSUPPORTED_SASL_MECHANISM with the enabled list, then the
        connection is closed). Raises IllegalSaslState outside START."""
        if self.state is not State.START:
            raise IllegalSaslState(f"SaslHandshake in SASL state {self.state.value}")
        if mechanism not in self.enabled:
            self._go(Event.BAD_MECHANISM)
            return False
        self._go(Event.HANDSHAKE_V0 if version == 0 else Event.HANDSHAKE_V1)
        self.mechanism = mechanism
        self._mech = _Plain(self.store) if mechanism == "PLAIN" else _Scram(mechanism, self.store)
        return True

    def token(self, token: bytes, *, raw: bool = False) -> bytes:
        """One client token (a SaslAuthenticate's bytes, or a raw frame after handshake v0) ->
        the server's token. Sets ``principal`` when the exchange succeeds. Raises
        AuthenticationFailed (state FAILED) or IllegalSaslState."""
        self._go(Event.RAW_TOKEN if raw else Event.AUTH_REQUEST)
        assert self._mech is not None
        try:
            out, user = self._mech.step(token)
        except AuthenticationFailed:
            self._go(Event.FAILURE)
            raise
        if user is None:
            self._go(Event.STEP_MORE)
        else:
            self._go(Event.SUCCESS)
            self.principal = f"User:{user}"
        return out
