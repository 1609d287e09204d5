def total(values):
    acc = 0
    for v in  values:   
        acc += v
    return acc  
