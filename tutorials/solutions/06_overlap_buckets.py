"""Reference solutions of step 6 (tutorials/06_overlap_buckets.py)."""


# Exercise 6.1
def bucket_plan(sizes, bucket_mb):
    limit = float("inf") if not bucket_mb else bucket_mb * 2**20   # bytes
    buckets, current, nbytes = [], [], 0
    for i in reversed(range(len(sizes))):        # backward order
        current.append(i)
        nbytes += 4 * sizes[i]
        if nbytes >= limit:
            buckets.append(current)
            current, nbytes = [], 0
    if current:
        buckets.append(current)
    return buckets


# Exercise 6.2
def gradient_ready_order(model, batch):
    order = []
    handles = [p.register_grad_hook(lambda t, name=name: order.append(name))
               for name, p in model.named_parameters()]
    try:
        model.loss(batch).backward()
    finally:
        for h in handles:
            h.remove()
    return order
