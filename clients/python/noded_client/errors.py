"""Typed errors. Every error the client raises is a NodedError carrying the gRPC status code
name, the node's message and the node that answered."""


class NodedError(Exception):
    def __init__(self, code, message, node=None):
        super().__init__("%s: %s%s" % (code, message, " (node %s)" % node if node else ""))
        self.code = code          # gRPC status code name, e.g. "RESOURCE_EXHAUSTED"
        self.message = message
        self.node = node


class Overloaded(NodedError):
    """RESOURCE_EXHAUSTED: an interceptor stage shed the request (still so after the retries).
    `rejected_by` names the stage, `retry_after` is the node's advice in seconds."""

    def __init__(self, code, message, node=None, rejected_by="", retry_after=0.0):
        super().__init__(code, message, node)
        self.rejected_by = rejected_by
        self.retry_after = retry_after


class Unavailable(NodedError):
    """UNAVAILABLE on every node tried: down, paused, halted, or not NORMAL (view change)."""


class InvalidTransaction(NodedError):
    """INVALID_ARGUMENT / UNAUTHENTICATED / FAILED_PRECONDITION: malformed, wrongly signed,
    wrong partition, or a nonce the pool refuses (too far ahead)."""


class NonceConflict(NodedError):
    """ALREADY_EXISTS for a different transaction: the nonce was used by another transaction of
    the same sender (Sender.resync() reads the account again)."""


class NotFound(NodedError):
    """NOT_FOUND: unknown partition, transaction, block or height."""


class CommitTimeout(NodedError):
    """The transaction was admitted but not committed within the wait; it may still commit.
    `tx_hash` identifies it (Client.wait_for_commit can wait on)."""

    def __init__(self, code, message, node=None, tx_hash=b""):
        super().__init__(code, message, node)
        self.tx_hash = tx_hash


_BY_CODE = {
    "RESOURCE_EXHAUSTED": Overloaded,
    "UNAVAILABLE": Unavailable,
    "INVALID_ARGUMENT": InvalidTransaction,
    "UNAUTHENTICATED": InvalidTransaction,
    "FAILED_PRECONDITION": InvalidTransaction,
    "ALREADY_EXISTS": NonceConflict,
    "NOT_FOUND": NotFound,
    "DEADLINE_EXCEEDED": CommitTimeout,
}


def from_status(code, message, node=None, **extra):
    """The typed error for a gRPC status code name."""
    cls = _BY_CODE.get(code, NodedError)
    if cls is Overloaded:
        return cls(code, message, node, rejected_by=extra.get("rejected_by", ""),
                   retry_after=extra.get("retry_after", 0.0))
    return cls(code, message, node)
