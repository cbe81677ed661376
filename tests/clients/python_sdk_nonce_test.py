#!/usr/bin/python3
"""clients/python (noded_client) without a node: how a Sender counts nonces when a block refused
its tx (REJECTED), what Client._known takes as "this tx took its nonce", and how a shed submit's
retry ticket goes back with the retry at the retry-after. The client's calls (or its stubs) are
replaced by fakes, so nothing is dialled.

Usage: python_sdk_nonce_test.py REPO
Exit 0 pass, 1 fail, 77 skipped (python modules or protoc missing).
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import e2e  # noqa: E402  (tests/e2e.py)


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def run(repo, tmp):
    os.environ["NODED_STUBS_DIR"] = os.path.join(tmp, "stubs")  # generated on first use
    sys.path.insert(0, os.path.join(repo, "clients", "python"))
    import noded_client as nc

    client = nc.Client(["127.0.0.1:9"], retry=False)  # never dialled: the calls are fakes
    chain, api = client.chain_pb2, client.client_pb2
    account_nonce = [4]  # the chain's nonce of the sender's last executed tx
    client.get_account = lambda partition, address: chain.Account(nonce=account_nonce[0])
    sent, answer = [], [chain.Receipt.SUCCESS]

    def submit(partition, data, tx_hash=None, wait=False, wait_timeout=10.0):
        sent.append(tx_hash)
        return nc.SubmitResult(tx_hash, receipt=chain.Receipt(status=answer[0], block_height=7))
    client.submit = submit

    sender = client.sender(1, nc.Key.from_seed("nonce-test"))
    check(sender.next_nonce == 5, "first nonce %d, want 5" % sender.next_nonce)
    sender.put("a", "1", wait=True)
    check(sender.next_nonce == 6, "after a SUCCESS: %d, want 6" % sender.next_nonce)
    # Refused: the chain took nonce 5 (the first put) but not 6.
    account_nonce[0] = 5
    answer[0] = chain.Receipt.REJECTED
    r = sender.put("b", "2", wait=True)
    check(r.receipt.status == chain.Receipt.REJECTED, "the refusal is returned as is")
    check(sender.next_nonce == 6, "after a REJECTED the sender reads the account again: %d, "
          "want 6 (nonce 6 is still free)" % sender.next_nonce)

    # _known: pending, or committed with the nonce consumed; not a refusal.
    answers = {}
    client.get_tx = lambda partition, tx_hash: answers[tx_hash]
    answers[b"p"] = api.GetTxResponse(state=api.GetTxResponse.PENDING)
    answers[b"s"] = api.GetTxResponse(state=api.GetTxResponse.COMMITTED,
                                      receipt=chain.Receipt(status=chain.Receipt.SUCCESS))
    answers[b"f"] = api.GetTxResponse(state=api.GetTxResponse.COMMITTED,
                                      receipt=chain.Receipt(status=chain.Receipt.FAILED))
    answers[b"r"] = api.GetTxResponse(state=api.GetTxResponse.COMMITTED,
                                      receipt=chain.Receipt(status=chain.Receipt.REJECTED))
    got = {h: client._known(1, h) for h in answers}
    check(got == {b"p": True, b"s": True, b"f": True, b"r": False}, "_known: %r" % got)
    print("sender nonces after SUCCESS / REJECTED, _known: ok", flush=True)
    retry_tickets(nc)


class _Shed(Exception):
    """What a grpc stub raises for a refused call (grpc.RpcError's interface)."""

    def __init__(self, grpc_mod, trailers):
        super().__init__("shed")
        self._code, self._trailers = grpc_mod.StatusCode.RESOURCE_EXHAUSTED, trailers

    def code(self):
        return self._code

    def details(self):
        return "rejected by stage 'pool'"

    def trailing_metadata(self):
        return self._trailers


def retry_tickets(nc):
    import grpc
    import noded_client.client as client_module
    shed = type("Shed", (_Shed, grpc.RpcError), {})
    client = nc.Client(["127.0.0.1:9"], retry=True, seed=1, backoff_base=1.0)
    api = client.client_pb2
    pauses, clock = [], [1000.0]

    def fake_sleep(d):
        pauses.append(d)
        clock[0] += d
    real_sleep, real_monotonic = client_module.time.sleep, client_module.time.monotonic
    client_module.time.sleep, client_module.time.monotonic = fake_sleep, lambda: clock[0]
    try:
        # SubmitTx: refused with a ticket, then with none, then admitted.
        seen = []

        class Stub:
            def SubmitTx(self, req, timeout=None):
                seen.append(req.retry_ticket)
                if len(seen) == 1:
                    raise shed(grpc, (("retry-after-ms", "250"), ("retry-ticket", "1234")))
                if len(seen) == 2:
                    raise shed(grpc, (("retry-after-ms", "100"),))
                return api.SubmitTxResponse(tx_hash=b"h" * 32)

            def SubmitTxBatch(self, req, timeout=None):
                seen.append((round(clock[0] - 1000.0, 3), list(req.signed_txs),
                             list(req.retry_tickets)))
                if len(seen) == 1:
                    return api.SubmitTxBatchResponse(results=[
                        api.TxResult(code=0, tx_hash=b"a"),
                        api.TxResult(code=8, message="pool", retry_after_ms=300, retry_ticket=77),
                        api.TxResult(code=8, message="pool", retry_after_ms=2000)])
                return api.SubmitTxBatchResponse(results=[api.TxResult(code=0)
                                                          for _ in req.signed_txs])
        client._stubs = [Stub()]
        client.submit(1, b"tx", tx_hash=b"h" * 32)
        check(seen == [0, 1234, 0], "tickets sent with SubmitTx: %r, want [0, 1234, 0]" % seen)
        check(pauses[0] == 0.25, "with a ticket the retry waits exactly the retry-after: %r"
              % pauses)
        check(pauses[1] > 0.1, "without one it adds jitter: %r" % pauses)
        seen.clear()
        pauses.clear()
        clock[0] = 1000.0
        out = client.submit_batch(1, [b"a", b"b", b"c"])
        check(seen[0] == (0.0, [b"a", b"b", b"c"], []), "first batch: %r" % (seen[0],))
        # b goes back alone at its own 300 ms with its ticket (not at c's 2 s, when the ticket
        # would have expired); c, with no ticket, after 2 s plus jitter.
        back = {tuple(txs): (t, tk) for t, txs, tk in seen[1:]}
        b_wave = [v for k, v in back.items() if b"b" in k]
        c_wave = [v for k, v in back.items() if b"c" in k]
        check(len(seen) in (2, 3) and b_wave and c_wave, "waves: %r" % seen)
        check(b_wave[0][0] == 0.3, "b went back at %r, want 0.3 s" % (b_wave[0][0],))
        by_tx = {tx: tk for t, txs, tks in seen[1:] for tx, tk in zip(txs, tks or [0] * len(txs))}
        check(by_tx == {b"b": 77, b"c": 0}, "tickets sent back: %r" % by_tx)
        check(c_wave[0][0] >= 2.0, "c went back before its retry-after: %r" % seen)
        check([o[0] for o in out] == ["OK"] * 3, "batch results: %r" % out)
    finally:
        client_module.time.sleep = real_sleep
        client_module.time.monotonic = real_monotonic
    print("retry tickets go back with the retry, at the retry-after: ok", flush=True)


def main():
    repo = sys.argv[1]
    why = e2e.missing()
    if why is None and (shutil.which("protoc") is None
                        or not os.access("/usr/bin/grpc_python_plugin", os.X_OK)):
        why = "protoc or grpc_python_plugin missing"
    if why:
        print("SKIP: %s" % why)
        return e2e.SKIP
    return e2e.run_in_tmp("python_sdk_nonce_test_", lambda tmp: run(repo, tmp))


if __name__ == "__main__":
    sys.exit(main())
