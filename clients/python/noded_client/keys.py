"""Ed25519 keys (python3-cryptography) and signed transactions in noded's wire format.

A transaction's hash is SHA-256 of the serialized SignedTransaction; both messages are
serialized deterministically (the node refuses non-canonical encodings)."""

import hashlib
import os

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from . import _proto


class Key:
    """An Ed25519 key; `address` is its 32-byte public key (the account address)."""

    def __init__(self, private_key):
        self._key = private_key
        self.address = private_key.public_key().public_bytes(serialization.Encoding.Raw,
                                                             serialization.PublicFormat.Raw)

    @classmethod
    def generate(cls):
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed):
        """From 32 raw bytes, or any str/bytes hashed to 32 bytes (deterministic test keys)."""
        if isinstance(seed, str):
            seed = seed.encode()
        if len(seed) != 32:
            seed = hashlib.sha256(seed).digest()
        return cls(Ed25519PrivateKey.from_private_bytes(seed))

    @classmethod
    def from_file(cls, path):
        """A PEM private key file (see save())."""
        with open(path, "rb") as f:
            return cls(serialization.load_pem_private_key(f.read(), password=None))

    def save(self, path):
        """Writes the private key as PEM (PKCS#8), readable by the owner only."""
        pem = self._key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)

    def sign(self, data):
        return self._key.sign(data)


def sign_tx(key, partition_id, nonce, put=None, transfer=None, memo=""):
    """(signed transaction bytes, tx hash) of one operation: put=(key, value) or
    transfer=(to_address, amount)."""
    chain_pb2, _, _ = _proto.modules()
    if (put is None) == (transfer is None):
        raise ValueError("exactly one of put= and transfer= is required")
    tx = chain_pb2.Transaction(partition=partition_id, sender=key.address, nonce=nonce, memo=memo)
    if put is not None:
        k, v = put
        tx.put.key = k.encode() if isinstance(k, str) else k
        tx.put.value = v.encode() if isinstance(v, str) else v
    else:
        to, amount = transfer
        tx.transfer.to = to
        tx.transfer.amount = amount
    tx_bytes = tx.SerializeToString(deterministic=True)
    signed = chain_pb2.SignedTransaction(tx=tx_bytes, signature=key.sign(tx_bytes))
    data = signed.SerializeToString(deterministic=True)
    return data, hashlib.sha256(data).digest()
