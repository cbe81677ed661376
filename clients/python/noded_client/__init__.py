"""noded_client: a Python client for noded's client API (Debian's python3-grpcio,
python3-protobuf, python3-cryptography; stubs generated from proto/ on first use).

    from noded_client import Client, Key
    client = Client("127.0.0.1:24001,127.0.0.1:24011")
    sender = client.sender("hot", Key.from_seed("alice"))
    print(sender.put("greeting", "hello", wait=True).receipt)

See client.py for the retry protocol (retry-after-ms, failover, nonces) and errors.py for the
typed errors.
"""

from .client import Client, Sender, SubmitResult
from .errors import (CommitTimeout, InvalidTransaction, NodedError, NonceConflict, NotFound,
                     Overloaded, Unavailable)
from .keys import Key, sign_tx

__all__ = ["Client", "Sender", "SubmitResult", "Key", "sign_tx", "NodedError", "Overloaded",
           "Unavailable", "InvalidTransaction", "NonceConflict", "NotFound", "CommitTimeout"]
