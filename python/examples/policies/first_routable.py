# A deliberately poor router, the seed of the search examples: every request goes to the
# first routable instance.
def route(request, instances):
    for i in instances:
        if i.routable:
            return i.index
    return None
