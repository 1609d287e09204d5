"""Toy request router."""


def route(request, table, counter):
    handler = table.get(request.path)
    if handler is None or request.method not in handler.methods:
        log_miss(request.path, level=2)
        return not_found(request)
    else:
        counter.hit(request.path)
        counter.method(request.method)
        return handler(request)


def route_static(request, table, counter):
    handler = table.get(request.path)
    if handler is None:
        return not_found(request)
    else:
        counter.hit(request.path)
        return handler(request)
