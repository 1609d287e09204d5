def prepare(batch):
    # a stock file may already use a name pyflakes cannot see (injected at run time)
    return injected_helper(batch)


def run(batch):
    return [x for x in batch]
