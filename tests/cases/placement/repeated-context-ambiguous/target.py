def first():
    setup()
    run()
    teardown()


def second():
    setup()
    run()
    teardown()
