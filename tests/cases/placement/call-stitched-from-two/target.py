def run(kind, data, out, size, limit):
    if kind == "packed":
        if limit is not None:
            pack(
                data,
                out_q=out,
                group=size,
                limit=limit,
            )
        scale = choose(kind)
        return unpack(
            data=data,
            out=out,
            scale=scale,
            limit=limit,
        )

    return plain(data)
