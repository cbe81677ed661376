#!/usr/bin/python3
"""Sends a transfer and prints its receipt: example.py CLIENT_ADDRS [PARTITION]."""
import sys
sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(__file__)))
from noded_client import Client, Key  # noqa: E402

client = Client(sys.argv[1])                       # e.g. 127.0.0.1:24001,127.0.0.1:24011
alice, bob = Key.from_seed("alice"), Key.from_seed("bob")
sender = client.sender(sys.argv[2] if len(sys.argv) > 2 else "hot", alice)
result = sender.transfer(bob.address, 0, wait=True)  # amount 0: needs no balance
print(result.receipt)
