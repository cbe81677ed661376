"""Client: noded's client API over gRPC, with the retry protocol the node speaks.

Retries (each call at most `max_attempts` times, within `deadline` seconds):
  RESOURCE_EXHAUSTED  an interceptor stage shed the request: wait what the node's
                      `retry-after-ms` trailer says plus a jittered share of an exponential
                      backoff, then send the same bytes again (a SubmitTxBatch retries only its
                      shed txs, with their own retry_after_ms). A pool refusal may carry a
                      retry ticket (`retry-ticket` trailer, TxResult.retry_ticket): the node
                      holds room for it from shortly before the retry-after until a while
                      after, so the retry goes back with the ticket at the retry-after, with
                      no jitter (the node already spread its refusals' slots);
  UNAVAILABLE         the node is down, paused, halted or changing view: fail over to the next
                      node of `targets` (round robin), with jittered exponential backoff once
                      every node has been tried;
  anything else       raised at once as a typed error (errors.py).
A retried submit sends the same signed bytes (the same hash), so it never doubles a
transaction: a copy the node already pooled answers ALREADY_EXISTS "duplicate transaction",
which counts as success.

Sender keeps one account's nonces in order: it reads the account's nonce once, signs each new
transaction with the next one, and moves on only when the node took it; a transaction still
refused after the retries leaves the nonce unused for the next one.

Thread-safety: a Client may be shared by threads; a Sender must be used by one thread at a time.
"""

import random
import threading
import time

import grpc

from . import _proto
from .errors import CommitTimeout, NodedError, NonceConflict, from_status
from .keys import sign_tx

_CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 100),
                    ("grpc.min_reconnect_backoff_ms", 100),
                    ("grpc.max_reconnect_backoff_ms", 1000)]


class SubmitResult:
    def __init__(self, tx_hash, receipt=None, spilled=False, node=None, attempts=1):
        self.tx_hash = tx_hash
        self.receipt = receipt      # node.chain.Receipt when the commit was waited for
        self.spilled = spilled      # admitted to the partition's lossless FIFO
        self.node = node            # the node that took it
        self.attempts = attempts    # calls made, retries included

    def __repr__(self):
        return "SubmitResult(tx_hash=%s, height=%s, attempts=%d)" % (
            self.tx_hash.hex()[:16], self.receipt.block_height if self.receipt else None,
            self.attempts)


class Client:
    def __init__(self, targets, *, deadline=30.0, call_timeout=10.0, max_attempts=10,
                 backoff_base=0.05, backoff_max=2.0, retry=True, seed=None, credentials=None):
        """`targets`: "host:port" of one or more nodes' client ports (a list or a comma-separated
        string). `retry=False` raises on the first refusal (for comparison and tests).
        `credentials`: grpc.ssl_channel_credentials(...) for TLS client ports."""
        if isinstance(targets, str):
            targets = [t for t in targets.split(",") if t]
        if not targets:
            raise ValueError("at least one target is required")
        self.targets = list(targets)
        self.deadline, self.call_timeout = deadline, call_timeout
        self.max_attempts = max_attempts if retry else 1
        self.backoff_base, self.backoff_max = backoff_base, backoff_max
        self.retry = retry
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._current = self._rng.randrange(len(self.targets))  # spread clients over nodes
        self._partition_ids = {}
        self.chain_pb2, self.client_pb2, grpc_mod = _proto.modules()
        self._stubs = []
        for t in self.targets:
            ch = (grpc.secure_channel(t, credentials, options=_CHANNEL_OPTIONS) if credentials
                  else grpc.insecure_channel(t, options=_CHANNEL_OPTIONS))
            self._stubs.append(grpc_mod.ClientServiceStub(ch))
        self.stats = {"calls": 0, "shed": 0, "failovers": 0}

    # -- reads --------------------------------------------------------------------------------

    def chain_status(self, partition):
        """GetChainStatusResponse: height, view, consensus_state, halt_reason, ..."""
        return self._call("GetChainStatus", self.client_pb2.GetChainStatusRequest(
            partition=self._ref(partition)))[0]

    def get_account(self, partition, address):
        """node.chain.Account (balance, nonce of its last executed tx) at the node's height."""
        return self._call("GetAccount", self.client_pb2.GetAccountRequest(
            partition=self._ref(partition), address=address))[0].account

    def get_tx(self, partition, tx_hash):
        """GetTxResponse (state PENDING / COMMITTED, receipt); NotFound if the node has no trace."""
        return self._call("GetTx", self.client_pb2.GetTxRequest(
            partition=self._ref(partition), tx_hash=tx_hash))[0]

    def get_block(self, partition, height=0, include_txs=False):
        """GetBlockResponse of `height` (0 = the latest)."""
        return self._call("GetBlock", self.client_pb2.GetBlockRequest(
            partition=self._ref(partition), height=height, include_txs=include_txs))[0]

    def partition_id(self, partition):
        """The numeric id of a partition name (asked once, then cached)."""
        if isinstance(partition, int):
            return partition
        with self._lock:
            if partition in self._partition_ids:
                return self._partition_ids[partition]
        pid = self.chain_status(partition).partition_id
        with self._lock:
            self._partition_ids[partition] = pid
        return pid

    # -- writes -------------------------------------------------------------------------------

    def submit(self, partition, signed_tx, tx_hash=None, wait=False, wait_timeout=10.0):
        """Submits signed bytes (keys.sign_tx). With `wait`, returns once committed (receipt) or
        raises CommitTimeout. Retries as the module comment says."""
        req = self.client_pb2.SubmitTxRequest(partition=self._ref(partition), signed_tx=signed_tx,
                                              wait_for_commit=wait,
                                              wait_timeout_ms=int(wait_timeout * 1000))
        timeout = wait_timeout + self.call_timeout if wait else self.call_timeout
        try:
            resp, node, attempts = self._call("SubmitTx", req, timeout=timeout,
                                              submit="wait" if wait else "submit")
        except NodedError as e:
            # ALREADY_EXISTS for these very bytes: an earlier attempt got in ("duplicate
            # transaction" while pooled, "replayed nonce" once committed). Not a failure.
            if e.code == "ALREADY_EXISTS" and (
                    _is_duplicate(e) or (tx_hash and self._known(partition, tx_hash))):
                result = SubmitResult(tx_hash or b"", node=e.node)
                if wait and tx_hash:
                    result.receipt = self.wait_for_commit(partition, tx_hash, wait_timeout)
                return result
            if isinstance(e, CommitTimeout):
                e.tx_hash = tx_hash or b""
            raise
        receipt = resp.receipt if resp.HasField("receipt") else None
        if wait and receipt is None:
            raise CommitTimeout("DEADLINE_EXCEEDED", "not committed within %gs" % wait_timeout,
                                node, tx_hash=resp.tx_hash)
        return SubmitResult(resp.tx_hash, receipt, resp.spilled, node, attempts)

    def submit_batch(self, partition, signed_txs):
        """Submits up to 1000 signed txs in one call; retries the shed ones (RESOURCE_EXHAUSTED),
        each after its own retry_after_ms (waves of the due ones), and the whole batch on
        UNAVAILABLE.
        Returns one (code name, message, tx_hash) per tx, in order; "OK" for the admitted ones
        (a duplicate of an earlier attempt included)."""
        pending = list(range(len(signed_txs)))
        out = [None] * len(signed_txs)
        tickets = {}  # index -> the retry ticket of its last refusal
        due = {}      # index -> monotonic time it may go back (its retry-after)
        start = time.monotonic()
        for attempt in range(self.max_attempts):
            # Each shed tx goes back at its own retry-after (a ticket holds room from then, and
            # only for a while), in waves of those that are due, in index order.
            now = time.monotonic()
            send = [i for i in pending if due.get(i, 0) <= now]
            req = self.client_pb2.SubmitTxBatchRequest(
                partition=self._ref(partition), signed_txs=[signed_txs[i] for i in send],
                retry_tickets=([tickets.get(i, 0) for i in send]
                               if any(i in tickets for i in send) else []))
            resp = self._call("SubmitTxBatch", req)[0]
            answered = time.monotonic()
            jitter = self._jitter(attempt)
            sent, shed = set(send), []
            for i, r in zip(send, resp.results):
                code = _CODE_NAMES.get(r.code, "UNKNOWN")
                if code == "ALREADY_EXISTS" and _is_duplicate_message(r.message):
                    code = "OK"
                out[i] = (code, r.message, r.tx_hash)
                tickets.pop(i, None)
                if code == "RESOURCE_EXHAUSTED":
                    shed.append(i)
                    if r.retry_ticket:
                        tickets[i] = r.retry_ticket  # back at the retry-after, no jitter
                    due[i] = answered + r.retry_after_ms / 1000.0 + (0 if r.retry_ticket
                                                                      else jitter)
            pending = sorted([i for i in pending if i not in sent] + shed)
            if not pending or attempt + 1 == self.max_attempts:
                break
            pause = max(0.0, min(due[i] for i in pending) - time.monotonic())
            if time.monotonic() + pause - start > self.deadline:
                break
            with self._lock:
                self.stats["shed"] += len(shed)
            time.sleep(pause)
        return out

    def wait_for_commit(self, partition, tx_hash, timeout=30.0, poll=0.1):
        """Polls GetTx until the tx is COMMITTED; returns its receipt or raises CommitTimeout."""
        end = time.monotonic() + timeout
        while True:
            try:
                r = self.get_tx(partition, tx_hash)
                if r.state == self.client_pb2.GetTxResponse.COMMITTED:
                    return r.receipt
            except NodedError as e:
                if e.code != "NOT_FOUND":  # not there yet on this node
                    raise
            if time.monotonic() >= end:
                raise CommitTimeout("DEADLINE_EXCEEDED", "not committed within %gs" % timeout,
                                    tx_hash=tx_hash)
            time.sleep(poll)

    def _known(self, partition, tx_hash):
        """True when the node has tx_hash pending, or committed by an inclusion that consumed its
        nonce (SUCCESS or FAILED). A tx only refused (REJECTED: a nonce gap or a replayed nonce)
        did not take its nonce."""
        try:
            r = self.get_tx(partition, tx_hash)
        except NodedError:
            return False
        if r.state == self.client_pb2.GetTxResponse.PENDING:
            return True
        return r.state == self.client_pb2.GetTxResponse.COMMITTED and r.receipt.status in (
            self.chain_pb2.Receipt.SUCCESS, self.chain_pb2.Receipt.FAILED)

    def sender(self, partition, key):
        """A Sender for `key`'s account on `partition`."""
        return Sender(self, partition, key)

    # -- the retry loop -----------------------------------------------------------------------

    def _ref(self, partition):
        if isinstance(partition, int):
            return self.client_pb2.PartitionRef(id=partition)
        return self.client_pb2.PartitionRef(name=partition)

    def _jitter(self, attempt):
        """Full jitter: uniform in [0, min(max, base * 2^attempt)]."""
        return self._rng.uniform(0, min(self.backoff_max, self.backoff_base * (2 ** attempt)))

    def _call(self, method, req, timeout=None, submit=None):
        """(response, node, attempts) of one RPC, retried as the module comment says. `submit`:
        "submit" (shed requests are retried; an unanswered one goes to the next node: resending
        the same bytes is harmless) or "wait" (a deadline means the commit wait ran out)."""
        start = time.monotonic()
        tried_since_success = 0
        last = None
        for attempt in range(self.max_attempts):
            with self._lock:
                i = self._current
            node = self.targets[i]
            with self._lock:
                self.stats["calls"] += 1
            try:
                resp = getattr(self._stubs[i], method)(req, timeout=timeout or self.call_timeout)
                return resp, node, attempt + 1
            except grpc.RpcError as e:
                code = e.code().name
                trailers = dict(e.trailing_metadata() or ())
                retry_after = int(trailers.get("retry-after-ms", "0") or 0) / 1000.0
                last = from_status(code, e.details() or "", node,
                                   rejected_by=trailers.get("rejected-by", ""),
                                   retry_after=retry_after)
                if not self.retry:
                    raise last
                if code == "RESOURCE_EXHAUSTED" and submit:
                    with self._lock:
                        self.stats["shed"] += 1
                    ticket = int(trailers.get("retry-ticket", "0") or 0)
                    if method == "SubmitTx":
                        req.retry_ticket = ticket  # 0 clears an earlier one
                    # A ticket holds room at the retry-after: go back then, not later.
                    pause = retry_after + (0 if ticket else self._jitter(attempt))
                elif code == "UNAVAILABLE" or (code == "DEADLINE_EXCEEDED" and
                                               submit != "wait"):
                    # Down, paused, not NORMAL, or not answering (e.g. a stopped process).
                    with self._lock:
                        if self._current == i:
                            self._current = (i + 1) % len(self.targets)
                        self.stats["failovers"] += 1
                    tried_since_success += 1
                    # Straight to the next node; back off once all have been tried.
                    pause = (self._jitter(attempt) if tried_since_success >= len(self.targets)
                             else 0.0)
                else:
                    raise last
                if attempt + 1 == self.max_attempts or \
                        time.monotonic() + pause - start > self.deadline:
                    raise last
                time.sleep(pause)
        raise last


def _is_duplicate_message(message):
    return "duplicate transaction" in message


def _is_duplicate(e):
    return e.code == "ALREADY_EXISTS" and _is_duplicate_message(e.message)


_CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}  # google.rpc.Code value -> name


class Sender:
    """One account's transactions, signed with consecutive nonces."""

    def __init__(self, client, partition, key):
        self.client, self.partition, self.key = client, partition, key
        self.partition_id = client.partition_id(partition)
        self._next_nonce = None

    @property
    def next_nonce(self):
        if self._next_nonce is None:
            self.resync()
        return self._next_nonce

    def resync(self):
        """Reads the account's nonce from the chain: the next transaction carries it + 1.
        (Transactions of this account still pending in a pool are not counted.)"""
        self._next_nonce = self.client.get_account(self.partition, self.key.address).nonce + 1

    def put(self, key, value, wait=False, wait_timeout=10.0, memo=""):
        return self._send(wait, wait_timeout, put=(key, value), memo=memo)

    def transfer(self, to, amount, wait=False, wait_timeout=10.0, memo=""):
        return self._send(wait, wait_timeout, transfer=(to, amount), memo=memo)

    def _send(self, wait, wait_timeout, **op):
        nonce = self.next_nonce
        data, tx_hash = sign_tx(self.key, self.partition_id, nonce, **op)
        try:
            result = self.client.submit(self.partition, data, tx_hash=tx_hash, wait=wait,
                                        wait_timeout=wait_timeout)
        except CommitTimeout:
            # Admitted and waiting to commit: the nonce is taken. Never seen by the node: it is
            # not (the next transaction reuses it).
            if self.client._known(self.partition, tx_hash):
                self._next_nonce = nonce + 1
            raise
        except NonceConflict:
            self._next_nonce = None  # another tx holds this nonce: read the account again
            raise
        if (result.receipt is not None
                and result.receipt.status == self.client.chain_pb2.Receipt.REJECTED):
            # Refused (a nonce gap or a replayed nonce): the nonce was not taken by this tx, so
            # this sender's count was off; read the account again.
            self._next_nonce = None
            return result
        self._next_nonce = nonce + 1
        return result
