def serve(conn):
    with conn.lock:
        request = conn.read()
        reply = handle(request)
        reply.stamp()
        conn.write(reply)
        log(reply)
