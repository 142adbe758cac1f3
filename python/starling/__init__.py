"""Starling: decentralized training from your own Python training loop.

    import starling
    with starling.Peer.from_env() as peer:       # under `node-launcher run SCENARIO -- python3 ...`
        for batch in data:
            ...                                   # compute grads at params (1-D float32/float64)
            peer.step(params, grads)              # one round of the scenario's algorithm, in place
            peer.log(loss=loss)

`starling.Peer` joins one rank of a run; `mix(params)` averages params with the neighbours (for
trainers that keep their own optimizer), `step(params, grads, lr=None)` runs the scenario's
algorithm. Arrays are 1-D contiguous numpy arrays or PyTorch CPU tensors, used in place, never
copied. Errors from Starling raise `starling.Error` (a RuntimeError). A scenario with
`algorithm.local_optimizer` (momentum, adam, lamb) makes `step` apply it per tensor: pass the
model's layout, `Peer.from_env(layout=[sizes of its tensors in the flat buffer])`.

PyTorch users wrap their optimizer instead: `starling.torch.DecentralizedOptimizer` (imported on
demand, so `import starling` works without torch).
"""

from ._starling import Error, Peer, __version__

__all__ = ["Error", "Peer", "__version__"]
