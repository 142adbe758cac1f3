"""PyTorch integration: wrap your optimizer, keep your training loop.

    import starling.torch
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer = starling.torch.DecentralizedOptimizer(optimizer, model)
    for x, y in loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()                      # your optimizer's step, then one gossip round

Launch one copy per node with `node-launcher run SCENARIO -- python3 train.py`.

No libtorch is linked: tensors reach Starling through DLPack, so any torch with `__dlpack__` (1.10
and later) works with the same build of Starling.
"""

import copy
import time

import torch

from . import Peer

__all__ = ["DecentralizedOptimizer", "DiLoCo", "Codistillation"]

_MODES = ("mix", "step")


class DecentralizedOptimizer(torch.optim.Optimizer):
    """Wraps `optimizer` so that every `step()` also talks to the neighbours.

    At construction, every parameter of `model` is moved into one flat contiguous buffer (each
    parameter becomes a view of it, values unchanged), so Starling exchanges the whole model as
    one array, in place, with no copy per step. Do this after the model is on its final device
    and dtype (CPU, float32 or float64): `model.to(...)` afterwards re-allocates the parameters,
    and the next `step()` raises.

    mode="mix" (default): `step()` runs `optimizer.step()` (momentum, Adam, weight decay, all as
    usual), then `peer.mix(params)`: one gossip round of the scenario (with its compression).

    mode="step": for the scenario's bias-corrected algorithms (exact_diffusion,
    gradient_tracking, nids, lead, ...). `step()` hands the flat gradient to
    `peer.step(params, grads, lr)`, where Starling's algorithm owns the update; `optimizer` is
    not stepped, and only its learning rate is used (`param_groups[0]["lr"]`, so LR schedulers
    work; every group must have the same lr). Gradients are kept in one flat buffer too. A
    scenario's `algorithm.local_optimizer` (momentum, adam or lamb, with dsgd or choco) then does
    what the torch optimizer would: Starling turns the flat gradient into the optimizer's
    direction u per parameter tensor and steps with lr * u before the gossip. The wrapper hands
    the peer the model's layout, `[p.numel() for p in params]` in the flat buffer's order
    (`model.parameters()`, tied weights once), so LAMB's trust ratio is per tensor. That
    optimizer's moments live in the peer: they are not in `state_dict()`, and a restarted
    trainer starts them at zero. In mode "mix" the scenario's local optimizer is not applied
    (`optimizer` is the local optimizer there).

    overlap=True (mode "mix" only): the gossip round overlaps the forward and backward pass.
    `zero_grad()` starts the exchange of the current parameters (`peer.mix_start`), a hook on
    every parameter's gradient calls `peer.poll()` as the backward pass reaches it, and `step()`
    waits for the round (`peer.mix_wait`, which writes the neighbours' average into the
    parameters) and then runs `optimizer.step()` with the gradient taken before the average:
    x <- sum_j w_ij x_j - lr * g(x), decentralized SGD's combine-while-compute form, where the
    default is x <- sum_j w_ij (x_j - lr * g(x_j)) (adapt, then combine). Call `zero_grad()` at
    the start of each step, before the forward pass (a `step()` with no exchange in flight mixes
    first, without overlap), and do not change the parameters between `zero_grad()` and
    `step()`.

    peer=None means `starling.Peer.from_env(layout=...)` (what `node-launcher run SCENARIO --
    COMMAND` sets up); the wrapper then closes it in `close()`. A peer passed in mode "step"
    without a layout gets the model's (`peer.set_layout`); one with another layout is refused.
    `zero_grad`, `state_dict`, `load_state_dict`, `param_groups` and `state` are the wrapped
    optimizer's. Buffers such as BatchNorm's running statistics are not exchanged. Start every
    rank from the same weights (the same `torch.manual_seed`) unless you mean not to.
    """

    def __init__(self, optimizer, model, peer=None, mode="mix", overlap=False):
        # torch.optim.Optimizer.__init__ is not called: every attribute it would set is the
        # wrapped optimizer's (the properties below), which keeps isinstance() checks (LR
        # schedulers) passing while state lives in one place.
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"optimizer must be a torch.optim.Optimizer; got {type(optimizer).__name__}")
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module; got {type(model).__name__}")
        if mode not in _MODES:
            raise ValueError(f'mode must be "mix" or "step"; got {mode!r}')
        if overlap and mode != "mix":
            raise ValueError('overlap=True needs mode="mix" (in mode "step" the gradient is '
                             'the round\'s input, so there is nothing to overlap it with)')
        self.optimizer = optimizer
        self.model = model
        self.mode = mode
        self._owns_peer = peer is None
        self._params, self._names = _model_parameters(model, optimizer)
        self._flat, self._grad = _flatten(self._params, with_grads=mode == "step")
        self._param_ptrs = [p.data_ptr() for p in self._params]
        self._grad_ptrs = [] if self._grad is None else [
            self._grad[o:o + p.numel()].data_ptr() for p, o in zip(self._params, self._offsets())]
        # The sizes of the parameter tensors in the flat buffer, in its order: the local
        # optimizer's tensors (an empty parameter holds no element of the buffer).
        self._layout = [p.numel() for p in self._params if p.numel() > 0]
        if peer is None:
            peer = Peer.from_env(layout=self._layout)
        elif mode == "step" and list(peer.layout) != self._layout:
            if peer.layout:
                raise ValueError(f"the peer was given the layout {list(peer.layout)}, but the "
                                 f"model's parameters have the sizes {self._layout}")
            peer.set_layout(self._layout)
        if mode == "mix" and peer.codistillation is not None:
            raise ValueError('the scenario codistils (algorithm.codistillation): models are not '
                             'averaged, so use mode="step" and add Codistillation.loss to the '
                             'loss')
        self.peer = peer
        self.overlap = bool(overlap)
        self._in_flight = False
        self._hooks = []
        if self.overlap:
            for p in self._params:
                self._hooks.append(p.register_hook(self._poll_hook))

    # ------------------------------------------------------------------ the optimizer's state
    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value):
        self.optimizer.param_groups = value

    @property
    def state(self):
        return self.optimizer.state

    @state.setter
    def state(self, value):
        self.optimizer.state = value

    @property
    def defaults(self):
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value):
        self.optimizer.defaults = value

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict)

    def add_param_group(self, param_group):
        known = {id(p) for p in self._params}
        params = param_group["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        if any(id(p) not in known for p in params):
            raise ValueError("add_param_group: Starling exchanges the parameters that were in the "
                             "model when it was wrapped; wrap again to add new ones")
        self.optimizer.add_param_group(param_group)

    def zero_grad(self, set_to_none=None):
        if set_to_none is None:
            self.optimizer.zero_grad()
        else:
            self.optimizer.zero_grad(set_to_none=set_to_none)
        if self.overlap and not self._in_flight:
            self._check_layout()
            self.peer.mix_start(self._flat)
            self._in_flight = True

    def _poll_hook(self, grad):
        if self._in_flight:
            self.peer.poll()
        return grad

    # ------------------------------------------------------------------ the step
    @property
    def flat_params(self):
        """The one buffer all parameters live in (1-D, in `model.parameters()` order)."""
        return self._flat

    @property
    def layout(self):
        """The sizes of the parameter tensors in the flat buffer, in order (the peer's layout)."""
        return list(self._layout)

    @property
    def flat_grads(self):
        """mode="step": the one buffer gradients are gathered into; None in mode "mix"."""
        return self._grad

    def step(self, closure=None, loss=None, grad_variance=None, grad_squared_mean=None):
        """One training step: the wrapped optimizer's step then `mix` (mode "mix"), or
        Starling's algorithm on the flat gradient (mode "step"). Returns closure's loss.
        Mode "step" hands the batch's loss (closure's, else `loss`: a number or a 0-d tensor)
        to the peer, for the scenario's `leader` method, and `grad_variance` and
        `grad_squared_mean` (AdaScale's estimates for the gradient in the parameters' .grad,
        both or neither; docs/algorithms.md §22) for its `adascale` method, whose schedule is
        then the scenario's step_size rather than the optimizer's lr."""
        self._check_layout()
        if self.mode == "mix" and self.overlap:
            if closure is not None:
                raise ValueError("overlap=True takes no closure: the parameters are being "
                                 "exchanged while the gradient is computed")
            if self._in_flight:
                self._in_flight = False
                self.peer.mix_wait()
            else:
                self.peer.mix(self._flat)
            return self.optimizer.step()
        if self.mode == "mix":
            loss = self.optimizer.step(closure)
            self.peer.mix(self._flat)
            return loss
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._gather_grads()
        # With AdaScale's estimates the scenario's step_size, evaluated at AdaScale's counter,
        # is the schedule: the optimizer's lr is not passed (the peer refuses one then).
        self.peer.step(self._flat, self._grad,
                       lr=self._lr() if grad_variance is None else None,
                       loss=None if loss is None else float(loss),
                       grad_variance=grad_variance, grad_squared_mean=grad_squared_mean)
        return loss

    def restore(self):
        """For a lost rank's restarted trainer (faults.restart, STARLING_REJOIN=1): asks the
        neighbours to take this rank back and writes the model they send into the parameters;
        `peer.round` is then the round the run is at. Call it before the first step. For any
        other trainer it does nothing."""
        if not self.peer.rejoining:
            return
        self.peer.restore(self._flat)

    def close(self):
        """Finishes an exchange in flight; closes the peer if this wrapper created it
        (peer=None)."""
        if self._in_flight:
            self._in_flight = False
            self.peer.mix_wait()
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self._owns_peer:
            self.peer.close()

    def __repr__(self):
        return (f"DecentralizedOptimizer(mode={self.mode!r}, overlap={self.overlap}, "
                f"{self._flat.numel()} "
                f"{str(self._flat.dtype).replace('torch.', '')} parameters, {self.peer!r})\n"
                f"{self.optimizer!r}")

    # ------------------------------------------------------------------ internals
    def _offsets(self):
        offset = 0
        for p in self._params:
            yield offset
            offset += p.numel()

    def _check_layout(self):
        for p, ptr, name in zip(self._params, self._param_ptrs, self._names):
            if p.data_ptr() != ptr:
                raise RuntimeError(
                    f"parameter {name} no longer lives in Starling's flat buffer (was the model "
                    "moved with .to(), .cuda(), .double() or given new .data after "
                    "DecentralizedOptimizer wrapped it?); wrap the model after moving it")

    def _gather_grads(self):
        with torch.no_grad():
            for p, offset, ptr in zip(self._params, self._offsets(), self._grad_ptrs):
                g = p.grad
                if g is not None and g.data_ptr() == ptr and g.is_contiguous():
                    continue  # backward accumulated straight into the flat buffer
                view = self._grad[offset:offset + p.numel()]
                if g is None:
                    view.zero_()
                else:
                    view.copy_(g.reshape(-1))
                if p.requires_grad:
                    p.grad = view.view_as(p)

    def _lr(self):
        lrs = {float(group["lr"]) for group in self.optimizer.param_groups}
        if len(lrs) != 1:
            raise ValueError('mode="step" takes one step size, but the optimizer\'s param groups '
                             f"have learning rates {sorted(lrs)}")
        return lrs.pop()


_OUTERS = ("sgd", "nesterov", "exact_diffusion", "noloco")


class DiLoCo:
    """DiLoCo over gossip (docs/algorithms.md §29): `inner_steps` steps of your optimizer, then
    one exchange with the neighbours and an outer step.

        inner = torch.optim.AdamW(model.parameters(), lr=1e-3)
        opt = starling.torch.DiLoCo(inner, model)     # inner_steps, outer... from the scenario
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()          # the inner step; every inner_steps-th also the outer round

    The outer model theta is where the last outer round left the parameters. Every H-th step,
    after the inner step: `peer.mix(params)` averages the local models over the graph (x-bar),
    D = theta - x-bar, and
      outer="sgd":       theta <- theta - outer_lr D (lr 1: plain averaging, local SGD)
      outer="nesterov":  m <- outer_momentum m + D; theta <- theta - outer_lr (D + outer_momentum m)
      outer="exact_diffusion": each inner step's gradient gets y added (the optimizer must be
                         plain torch.optim.SGD), y <- y + (x - x-bar) / (2 lr H) after the mix,
                         and theta <- theta - outer_lr D: the optimum of everyone's data, not a
                         mixture biased by the local steps.
      outer="noloco":    the exchange mixes [theta, x] (theta-bar, x-bar), and
                         d <- outer_momentum d - outer_lr (theta-bar - x-bar) - pull (theta -
                         theta-bar); theta <- theta + d (NoLoCo; lr 0.7, momentum 0.5 and pull =
                         lr by default; with the scenario's random_matching topology, one
                         neighbour a round).
    On the complete graph this is all-reduce DiLoCo. The parameters then hold theta. Arguments
    left None come from the scenario's algorithm (kind "diloco": inner_steps, outer.kind, lr,
    momentum; peer.diloco); with another scenario inner_steps must be given, outer defaults to
    "nesterov" with lr 0.7 and momentum 0.9 (DiLoCo's). Parameters move into one flat buffer as
    with DecentralizedOptimizer (wrap after moving the model). overlap=True (or the scenario's
    "overlap": true) sends each round's local model and finishes the round H steps later
    (finish()): the exchange travels during the next inner steps, and the outer step lands under
    them (x <- theta + (x - sent); exact_diffusion's y from the model as sent). fragments=F (or
    the scenario's "fragments": F; Streaming DiLoCo) cuts the flat parameters into F contiguous fragments of
    ceil(d / F) values: every H / F steps one of them, in turn, is mixed and takes its outer step
    (its theta, momentum and y), and only that fragment of the parameters restarts from its new
    theta, so each fragment is still exchanged every H steps but a round sends 1/F of the model;
    inner_steps must be a multiple of F; with a lossy codec each fragment has reference points
    of its own, and under error feedback a residual of its own (the scenario's "fragments" must
    be F). A membership change restarts nothing here:
    the outer momentum and y carry on.

    Peers of different speed: seconds=s (or the scenario's "inner_steps": {"kind": "by_time",
    "seconds": s} when inner_steps is not passed) makes a round as many inner steps as fit in
    s / F seconds of `clock` (time.monotonic by default), counted from the wrapper's making or
    the last round's end: at least one step, at most inner_steps / F (inner_steps is then the
    cap, the scenario's max_steps). The mix weights each rank's local model by the steps its
    fragment took since its last exchange (it sends [h x, h]; exact_diffusion mixes
    unweighted), as node-launcher's by_time. The ranks then take different numbers of steps:
    loop over `opt.batches(loader)` (or `while not opt.done`),
    which ends every rank after the run's last round (the scenario's rounds).

    With a lossy codec in the scenario (e.g. "compression": {"kind": "topk", "ratio": 0.01}),
    each exchange carries the compressed change of the local model against reference points
    every rank tracks alike, and x-bar is the mix of the reference points (§29). `shared_start`
    (default True) says every rank starts from the same model (seed the initialization alike),
    so the reference points start there and no exchange is spent on the start; pass False if
    the ranks start from different models (the reference points then start at zero, and the
    mix is CHOCO-gossip's). The scenario's per-tensor rules ("compression": {"layers": ...})
    see the model's tensors: a peer passed without a layout gets the model's
    (`peer.set_layout`), one with another layout is refused.
    """

    def __init__(self, inner_optimizer, model, peer=None, inner_steps=None, outer=None,
                 outer_lr=None, outer_momentum=None, fragments=None, overlap=None,
                 shared_start=True, pull=None, seconds=None, clock=None):
        if not isinstance(inner_optimizer, torch.optim.Optimizer):
            raise TypeError("inner_optimizer must be a torch.optim.Optimizer; got "
                            f"{type(inner_optimizer).__name__}")
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module; got {type(model).__name__}")
        self.optimizer = inner_optimizer
        self.model = model
        self._owns_peer = peer is None
        self._params, self._names = _model_parameters(model, inner_optimizer)
        self._flat, _ = _flatten(self._params, with_grads=False)
        self._param_ptrs = [p.data_ptr() for p in self._params]
        self._layout = [p.numel() for p in self._params if p.numel() > 0]
        if peer is None:
            peer = Peer.from_env(layout=self._layout)
        self.peer = peer
        keys = peer.diloco or {}
        # by_time: the scenario's, unless inner_steps (a count) or seconds is passed here.
        if seconds is None and inner_steps is None and keys.get("seconds", 0) > 0:
            seconds = keys["seconds"]
        self.seconds = None if seconds is None else float(seconds)
        if self.seconds is not None and not 0 < self.seconds < float("inf"):
            raise ValueError(f"seconds must be positive; got {self.seconds}")
        if self.seconds is not None and inner_steps is None and keys.get("seconds", 0) <= 0:
            inner_steps = 10000  # the cap when the scenario has none (its max_steps default)
        self._clock = clock if clock is not None else time.monotonic
        self.overlap = bool(overlap if overlap is not None else keys.get("overlap", False))
        self.inner_steps = int(inner_steps if inner_steps is not None
                               else keys.get("inner_steps", 0))
        if self.inner_steps < 1:
            raise ValueError("inner_steps must be given (at least 1) when the scenario's "
                             "algorithm is not diloco")
        self.fragments = int(fragments if fragments is not None else keys.get("fragments", 1))
        if self.fragments < 1:
            raise ValueError(f"fragments must be at least 1; got {self.fragments}")
        if self.inner_steps % self.fragments != 0:
            raise ValueError(f"each of the {self.fragments} fragments is mixed after inner_steps / "
                             f"fragments inner steps: inner_steps ({self.inner_steps}) must be a "
                             "multiple of fragments")
        if self.fragments > 1 and keys.get("compressed", False) and \
                self.fragments != keys.get("fragments", 1):
            raise ValueError(f"fragments={self.fragments} with the scenario's lossy codec: the "
                             "peer keeps reference points (and error feedback's residual) for "
                             f"the scenario's fragments ({keys.get('fragments', 1)}); set "
                             '"fragments" there')
        # A model on a GPU: its outer state and exchange buffers stay there and the exchanges run
        # there (peer.mix on CUDA tensors, docs/cuda.md), uncompressed.
        self._on_gpu = self._flat.device.type != "cpu"
        if self._on_gpu and keys.get("compressed", False):
            raise NotImplementedError(
                "DiLoCo on a GPU model mixes uncompressed for now: compressed differences need "
                "reference points the GPU path does not keep yet (docs/cuda.md); leave the "
                "scenario's compression out, or train a CPU model")
        if self.seconds is not None and keys.get("compressed", False):
            raise NotImplementedError(
                "by_time sends each local model weighted by its steps, [h x, h], which the "
                "scenario's lossy codec would compress as a model; leave compression out")
        d = self._flat.numel()
        self._fragment = -(-d // self.fragments)  # ceil(d / F): the last fragment may be shorter
        self._steps_per_round = self.inner_steps // self.fragments
        self.outer = outer if outer is not None else keys.get("outer", "nesterov")
        if self.outer not in _OUTERS:
            raise ValueError(f"outer must be one of {', '.join(_OUTERS)}; got {self.outer!r}")
        # The scenario's values for its own outer kind; otherwise DiLoCo's lr 0.7 and momentum
        # 0.9 (nesterov), NoLoCo's lr 0.7, momentum 0.5 and a pull as strong as the lr, and plain
        # averaging (lr 1) for sgd and exact_diffusion.
        same = bool(keys) and keys.get("outer") == self.outer
        default_lr = keys["outer_lr"] if same else \
            (0.7 if self.outer in ("nesterov", "noloco") else 1.0)
        self.outer_lr = float(outer_lr if outer_lr is not None else default_lr)
        default_momentum = keys.get("outer_momentum", 0.9) if same else \
            (0.5 if self.outer == "noloco" else 0.9)
        self.outer_momentum = float(outer_momentum if outer_momentum is not None
                                    else default_momentum)
        self.pull = float(pull if pull is not None
                          else (keys.get("pull", self.outer_lr) if same else self.outer_lr))
        if not 0 < self.outer_lr <= 2:
            raise ValueError(f"outer_lr must be in (0, 2]; got {self.outer_lr}")
        if not 0 <= self.outer_momentum < 1:
            raise ValueError(f"outer_momentum must be in [0, 1); got {self.outer_momentum}")
        if not 0 < self.pull <= 2:
            raise ValueError(f"pull must be in (0, 2]; got {self.pull}")
        if self.outer == "exact_diffusion" and type(inner_optimizer) is not torch.optim.SGD:
            raise ValueError('outer="exact_diffusion" corrects the inner gradients, which a '
                             "stateful optimizer would change: use torch.optim.SGD (no momentum)")
        with torch.no_grad():
            self._theta = self._flat.clone()
            self._local = torch.empty_like(self._flat)
            self._momentum = torch.zeros_like(self._flat) \
                if self.outer in ("nesterov", "noloco") else None
            self._dual = torch.zeros_like(self._flat) if self.outer == "exact_diffusion" else None
            # overlap: the fragment of the local model as sent. The buffer the exchange mixes a
            # fragment into, padded with zeros to ceil(d / F) (noloco: [theta, x] of it, twice
            # that): the parameters themselves when there is one fragment, no overlap and not
            # noloco.
            self._sent = torch.empty(self._fragment, dtype=self._flat.dtype,
                                     device=self._flat.device) if self.overlap else None
            self._noloco = self.outer == "noloco"
            # by_time weights each local model by its steps: [h x, h] (exact_diffusion: no).
            self._weighted = self.seconds is not None and self.outer != "exact_diffusion"
            width = (2 if self._noloco else 1) * self._fragment + (1 if self._weighted else 0)
            self._mixing = torch.empty(width, dtype=self._flat.dtype, device=self._flat.device) \
                if self.overlap or self.fragments > 1 or self._noloco or self._weighted \
                else None
        self._pending = None    # overlap: the fragment (lo, n) whose exchange is in flight
        # by_time: the inner steps each fragment took since its last exchange, the round's steps
        # so far and when it began.
        self._since = [0] * self.fragments
        self._round_steps = 0
        self._round_start = self._clock() if self.seconds is not None else None
        # The model's tensors for the scenario's per-tensor codec rules ("compression": {"layers":
        # ...}), given to a peer made without them, when the exchange carries the flat parameters
        # as they are (not in fragments, not noloco's [theta, x]).
        if self.fragments == 1 and not self._noloco and not self._weighted and \
                not self._owns_peer:
            if list(peer.layout) not in ([], self._layout):
                raise ValueError(f"the peer was given the layout {list(peer.layout)}, but the "
                                 f"model's parameters have the sizes {self._layout}")
            if not list(peer.layout) and peer.round == 0:
                peer.set_layout(self._layout)
        # (noloco's codec needs error feedback, which has no reference points.)
        # (Uncompressed, as on a GPU, it changes nothing.)
        if shared_start and not self._noloco and not self._weighted and peer.round == 0 and \
                not peer.rejoining and not self._on_gpu:
            peer.mix_reference(self._flat)
        self.steps = 0          # inner steps taken
        self.outer_rounds = 0
        self.pseudo_gradient_norm = 0.0

    def zero_grad(self, set_to_none=None):
        if set_to_none is None:
            self.optimizer.zero_grad()
        else:
            self.optimizer.zero_grad(set_to_none=set_to_none)

    def restore(self):
        """For a lost rank's restarted trainer (faults.restart, STARLING_REJOIN=1): asks the
        neighbours to take this rank back, and takes the model they send as the parameters and
        the outer model theta, and the round the run is at (peer.round): `steps` and
        `outer_rounds` count from there, so the fragments' schedule and the loop's end are the
        other ranks'. The outer momentum and y start at zero (node-launcher's own diloco also
        takes the neighbour's momentum). Call it before the first step; for any other trainer it
        does nothing."""
        if not self.peer.rejoining:
            return
        self.peer.restore(self._flat)
        with torch.no_grad():
            self._theta.copy_(self._flat)
        self.outer_rounds = self.peer.round
        self.steps = self.peer.round * self._steps_per_round
        self._since = [0] * self.fragments
        if self.seconds is not None:
            self._round_start = self._clock()

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def flat_params(self):
        """The one buffer all parameters live in (1-D, in `model.parameters()` order)."""
        return self._flat

    def step(self, closure=None):
        """The inner optimizer's step; every `inner_steps`-th also the outer round. Returns
        closure's loss."""
        for p, ptr, name in zip(self._params, self._param_ptrs, self._names):
            if p.data_ptr() != ptr:
                raise RuntimeError(f"parameter {name} no longer lives in Starling's flat buffer; "
                                   "wrap the model after moving it")
        if self._dual is not None:
            if closure is not None:
                raise ValueError('outer="exact_diffusion" takes no closure (its correction is '
                                 "added to the gradients before the inner step)")
            with torch.no_grad():
                offset = 0
                for p in self._params:
                    n = p.numel()
                    if p.grad is not None:
                        p.grad.add_(self._dual[offset:offset + n].view_as(p))
                    offset += n
        loss = self.optimizer.step(closure)
        self.steps += 1
        self._round_steps += 1
        if self._round_due():
            self._since = [h + self._round_steps for h in self._since]
            self._round_steps = 0
            if self.overlap:
                self._overlapped_round()
            else:
                self._outer_round()
            if self.seconds is not None:
                self._round_start = self._clock()
        elif self._pending is not None:
            self.peer.poll()  # move the exchange along between inner steps
        return loss

    def _round_due(self):
        """Whether the inner step just taken ends a round: every inner_steps / F steps, or by_time
        when the round's seconds / F are up (or it took inner_steps / F steps, the cap)."""
        if self._round_steps >= self._steps_per_round:
            return True
        return self.seconds is not None and \
            self._clock() - self._round_start >= self.seconds / self.fragments

    @property
    def rounds(self):
        """The outer rounds this rank has started (with overlap the last may still be in
        flight: outer_rounds counts those landed)."""
        return self.peer.round + (1 if self._pending is not None else 0)

    @property
    def done(self):
        """True once this rank has started the run's last round (the scenario's rounds; with
        overlap close() or finish() lands it): the end of a loop whose ranks take different
        numbers of inner steps (by_time). False while the scenario has no last round."""
        last = self.peer.last_round
        return last is not None and self.rounds >= last

    def batches(self, iterable):
        """Yields from `iterable`, starting it over each time it ends, until `done`: the loop of
        a trainer whose ranks take different numbers of inner steps (by_time),

            for x, y in opt.batches(loader):
                opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()

        Needs the scenario's rounds (peer.last_round)."""
        if self.peer.last_round is None:
            raise ValueError("batches() ends at the run's last round, and the scenario has no "
                             '"rounds"; loop on your own and stop every rank at the same round')
        while not self.done:
            empty = True
            for item in iterable:
                empty = False
                yield item
                if self.done:
                    return
            if empty:
                raise ValueError("batches(): the iterable yielded nothing; it is started again "
                                 "each time it ends, so pass a list, a DataLoader or an object "
                                 "whose __iter__ starts over, not a generator")

    def _next_fragment(self):
        """The round's fragment of the flat parameters, (first element, length): fragment r mod F
        of the peer's round r (Streaming DiLoCo's schedule; the peer's count, so a rejoined or
        resumed trainer keeps its neighbours' schedule, and the peer's reference points of
        compressed differences follow the same one)."""
        lo = min(self._flat.numel(), (self.peer.round % self.fragments) * self._fragment)
        n = min(self._flat.numel(), lo + self._fragment) - lo
        return lo, n

    def _fill(self, lo, n, x):
        """The exchange's buffer for the fragment [lo, lo + n): its local model x (noloco:
        [theta, x]; by_time: h x and, last, h, the steps the fragment took since its last
        exchange), zeros in the padding."""
        self._mixing.zero_()
        at = self._fragment if self._noloco else 0
        if self._noloco:
            self._mixing[:n].copy_(self._theta[lo:lo + n])
        if self._weighted:
            f = self.peer.round % self.fragments
            h = self._since[f]
            self._mixing[at:at + n].copy_(x).mul_(h)
            self._mixing[-1] = h
        else:
            self._mixing[at:at + n].copy_(x)
        if self.seconds is not None:
            self._since[self.peer.round % self.fragments] = 0

    def _mixed(self, n):
        """x-bar (and noloco's theta-bar, else None) in the exchange's buffer once mixed."""
        at = self._fragment if self._noloco else 0
        xbar = self._mixing[at:at + n]
        if self._weighted:
            # x-bar = sum_j w_ij h_j x_j / sum_j w_ij h_j
            xbar = xbar / self._mixing[-1]
        return xbar, (self._mixing[:n] if self._noloco else None)

    def _outer_step(self, lo, n, xbar, thetabar=None):
        """theta's outer step on elements [lo, lo + n) from the mixed local models x-bar there
        (noloco: and the mixed outer models theta-bar); returns theta's new values there (a
        view)."""
        theta = self._theta[lo:lo + n]
        if self._noloco:
            # delta <- mu delta - lr (theta-bar - x-bar) - pull (theta - theta-bar); theta += delta.
            m = self._momentum[lo:lo + n]
            m.copy_(self.outer_momentum * m - self.outer_lr * (thetabar - xbar)
                    - self.pull * (theta - thetabar))
            theta.add_(m)
            return theta
        delta = theta - xbar                  # D
        if self.outer == "nesterov":
            m = self._momentum[lo:lo + n]
            m.mul_(self.outer_momentum).add_(delta)
            update = delta + self.outer_momentum * m
        else:
            update = delta
        # theta <- x-bar + (D - lr u), which is theta - lr u (docs/algorithms.md §29).
        theta.copy_(xbar + (delta - self.outer_lr * update))
        return theta

    def _overlapped_round(self):
        """overlap=True (eager, one-step delay, as node-launcher's "overlap": true): the round
        sent H / F steps ago is finished now, its outer step lands under the inner steps taken
        since (x <- theta + (x - sent)), and this round's fragment of the local model leaves at
        once; the next H / F inner steps run while it travels."""
        self.finish()
        lo, n = self._next_fragment()
        with torch.no_grad():
            x = self._flat[lo:lo + n]
            self.pseudo_gradient_norm = float(torch.linalg.vector_norm(self._theta[lo:lo + n] - x))
            self._sent[:n].copy_(x)
            self._fill(lo, n, x)
        self.peer.mix_start(self._mixing)
        self._pending = (lo, n)

    def finish(self):
        """overlap=True: waits for the exchange in flight and takes its outer step (close() and
        state_dict() call it; a no-op when nothing is in flight)."""
        if self._pending is None:
            return
        lo, n = self._pending
        self.peer.mix_wait()
        self._pending = None
        with torch.no_grad():
            xbar, thetabar = self._mixed(n)
            if self._dual is not None:
                # y from the local model as sent (the inner steps taken since used the old y,
                # as node-launcher's overlap does).
                self._dual[lo:lo + n].add_(self._sent[:n] - xbar, alpha=self._dual_scale())
            theta = self._outer_step(lo, n, xbar, thetabar)
            self._flat[lo:lo + n].add_(theta - self._sent[:n])  # theta + (x - sent)
        self.outer_rounds += 1
        self._log_round()

    def _dual_scale(self):
        """exact_diffusion: 1 / (2 lr H), over the H inner steps a fragment takes between its
        exchanges (one inner lr: the correction's fixed point assumes it)."""
        lrs = {float(g["lr"]) for g in self.optimizer.param_groups}
        if len(lrs) != 1:
            raise ValueError('outer="exact_diffusion" takes one inner lr; the param groups have '
                             f"{sorted(lrs)}")
        return 1.0 / (2.0 * lrs.pop() * self.inner_steps)

    def _outer_round(self):
        lo, n = self._next_fragment()
        with torch.no_grad():
            x = self._flat[lo:lo + n]
            self.pseudo_gradient_norm = float(torch.linalg.vector_norm(self._theta[lo:lo + n] - x))
            if self._dual is not None:
                self._local[lo:lo + n].copy_(x)
            if self._mixing is None:
                if self.seconds is not None:
                    self._since[0] = 0
                self.peer.mix(x)                  # x = x-bar, the mixed local models
                xbar, thetabar = x, None
            else:
                self._fill(lo, n, x)
                self.peer.mix(self._mixing)
                xbar, thetabar = self._mixed(n)
            if self._dual is not None:
                self._dual[lo:lo + n].add_(self._local[lo:lo + n] - xbar,
                                           alpha=self._dual_scale())
            x.copy_(self._outer_step(lo, n, xbar, thetabar))
        self.outer_rounds += 1
        self._log_round()

    def _log_round(self):
        """The round's metrics in the run's outputs, as node-launcher's diloco logs them
        (metrics.jsonl has their mean over the ranks): outer_round, inner_steps and
        pseudo_gradient_norm, ||theta - x|| of the round's fragment before the mix."""
        self.peer.log(outer_round=self.outer_rounds, inner_steps=self.steps,
                      pseudo_gradient_norm=self.pseudo_gradient_norm)

    def state_dict(self):
        """The inner optimizer's state and the outer state (theta, momentum, y, counters); with
        overlap the exchange in flight is finished first."""
        self.finish()
        return {"inner": self.optimizer.state_dict(), "theta": self._theta.clone(),
                "momentum": None if self._momentum is None else self._momentum.clone(),
                "dual": None if self._dual is None else self._dual.clone(),
                "steps": self.steps, "outer_rounds": self.outer_rounds,
                "since": list(self._since), "round_steps": self._round_steps}

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state["inner"])
        with torch.no_grad():
            self._theta.copy_(state["theta"])
            if self._momentum is not None:
                self._momentum.copy_(state["momentum"])
            if self._dual is not None:
                self._dual.copy_(state["dual"])
        self.steps, self.outer_rounds = int(state["steps"]), int(state["outer_rounds"])
        if "since" in state:
            self._since = [int(h) for h in state["since"]]
            self._round_steps = int(state["round_steps"])

    def close(self):
        """Finishes an exchange in flight (overlap) and closes the peer if this wrapper created it
        (peer=None)."""
        self.finish()
        if self._owns_peer:
            self.peer.close()

    def __repr__(self):
        return (f"DiLoCo(inner_steps={self.inner_steps}, outer={self.outer!r}, "
                f"outer_lr={self.outer_lr}, outer_momentum={self.outer_momentum}, "
                + (f"pull={self.pull}, " if self._noloco else "")
                + (f"seconds={self.seconds}, " if self.seconds is not None else "")
                + f"fragments={self.fragments}, overlap={self.overlap}, "
                f"{self._flat.numel()} parameters, {self.peer!r})\n{self.optimizer!r}")


def _model_parameters(model, optimizer):
    params, names, seen = [], [], set()
    for name, p in model.named_parameters():
        if id(p) not in seen:  # tied weights appear once
            seen.add(id(p))
            params.append(p)
            names.append(name)
    if not params:
        raise ValueError("model has no parameters")
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in seen:
                raise ValueError(f"the optimizer holds a parameter of shape {tuple(p.shape)} that "
                                 "is not in model.parameters(); Starling exchanges the model's "
                                 "parameters, so pass the model the optimizer trains")
    dtypes = {p.dtype for p in params}
    if len(dtypes) != 1 or dtypes.pop() not in (torch.float32, torch.float64):
        found = ", ".join(f"{n}: {str(p.dtype).replace('torch.', '')}"
                          for n, p in zip(names, params))
        raise TypeError("DecentralizedOptimizer needs all parameters float32 or all float64; "
                        f"got {found}")
    for n, p in zip(names, params):
        if p.device.type != "cpu":
            raise TypeError(f"parameter {n} is on {p.device}; Starling takes CPU tensors")
        if p.layout != torch.strided:
            raise TypeError(f"parameter {n} has layout {p.layout}; Starling takes dense tensors")
    return params, names


def _flatten(params, with_grads):
    """Moves every parameter into one flat buffer (a view each); returns (flat, flat_grad)."""
    total = sum(p.numel() for p in params)
    dtype, device = params[0].dtype, params[0].device
    where = {str(p.device) for p in params}
    if len(where) > 1:
        raise ValueError(f"the model's parameters are on {sorted(where)}: Starling keeps them in "
                         "one flat buffer, so move the model to one device first")
    with torch.no_grad():
        # On the model's device: a CUDA model's buffer stays on its GPU (Peer.mix mixes it
        # there, docs/cuda.md).
        flat = torch.empty(total, dtype=dtype, device=device)
        grad = torch.zeros(total, dtype=dtype, device=device) if with_grads else None
        offset = 0
        for p in params:
            n = p.numel()
            view = flat[offset:offset + n]
            view.copy_(p.reshape(-1))
            p.data = view.view_as(p)
            if grad is not None and p.grad is not None:
                grad[offset:offset + n].copy_(p.grad.reshape(-1))
                p.grad = grad[offset:offset + n].view_as(p)
            offset += n
    return flat, grad


class Codistillation:
    """The codistillation term of a scenario's `algorithm.codistillation` (docs/algorithms.md
    §25) for a trainer's own classifier:

        opt = DecentralizedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model,
                                     peer, mode="step")
        codistil = Codistillation(peer, model)
        for x, y in loader:
            opt.zero_grad()
            logits = model(x)
            loss = F.cross_entropy(logits, y) + codistil.loss(logits, x)
            loss.backward()
            opt.step()          # peer.step: every `period` steps the models are exchanged

    `loss(logits, inputs)` is alpha * D(softmax(logits), the neighbours' predictions on
    `inputs`): their models are `peer.neighbour_models()` (flat vectors in the order of
    `model.parameters()`, the DecentralizedOptimizer's buffer), loaded into one copy of `model`
    (torch.nn.utils.vector_to_parameters) that runs in eval mode without gradients. With K
    neighbours, cross_entropy is -sum_c qbar_c log p_c averaged over the batch (qbar the mean of
    their softmax outputs), kl adds their mean negative entropy (same gradient,
    alpha (p - qbar) / batch per logit); a zero tensor while the term is off (burn-in, before the
    first exchange). Lower your weight decay when codistilling: the term regularises.
    """

    def __init__(self, peer, model):
        config = peer.codistillation
        if config is None:
            raise ValueError("the scenario has no algorithm.codistillation")
        self.peer = peer
        self.alpha = float(config["alpha"])
        self.distance = config["distance"]
        self._teacher = copy.deepcopy(model)
        self._teacher.eval()
        for p in self._teacher.parameters():
            p.requires_grad_(False)

    def loss(self, logits, inputs):
        models = self.peer.neighbour_models()
        if not models:
            return logits.new_zeros(())
        params = list(self._teacher.parameters())
        with torch.no_grad():
            qbar = None
            negentropy = logits.new_zeros(())
            for m in models:
                flat = torch.frombuffer(m, dtype=params[0].dtype)
                torch.nn.utils.vector_to_parameters(flat, params)
                logq = torch.log_softmax(self._teacher(inputs), dim=1)
                q = logq.exp()
                qbar = q if qbar is None else qbar + q
                if self.distance == "kl":
                    negentropy = negentropy + torch.xlogy(q, q).sum(dim=1).mean()
            qbar = qbar / len(models)
            negentropy = negentropy / len(models)
        d = -(qbar * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
        if self.distance == "kl":
            d = d + negentropy
        return self.alpha * d
