def run(batch):
    return [x for x in batch]


def prepare(batch):
    # a stock file may already use a name pyflakes cannot see (injected at run time)
    batch = list(batch)
    return injected_helper(batch)
