# Load and KV together: fewest requests first, then the most free KV blocks.
def route(request, instances):
    best = None
    for i in instances:
        if not i.routable:
            continue
        key = (i.load, -i.free_blocks)
        if best is None or key < best[0]:
            best = (key, i.index)
    return None if best is None else best[1]
