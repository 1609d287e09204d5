def flush(buf, clear):
    buf.sync()

    # reset only when asked
    if clear:
        buf.reset()
    if buf.pending:
        buf.drain()
        buf.close()
