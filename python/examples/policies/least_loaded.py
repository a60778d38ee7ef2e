# Least loaded: the routable instance with the fewest requests queued, running or in flight
# (ties to the lowest index).
def route(request, instances):
    best = None
    for i in instances:
        if i.routable and (best is None or i.load < best.load):
            best = i
    return None if best is None else best.index
