def serve(conn):
    with conn.lock:
        request = conn.read()
        reply = handle(request)
        conn.write(reply)
        log(reply)
