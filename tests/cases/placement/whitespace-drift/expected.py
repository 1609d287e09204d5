def total(values):
    acc = 0
    for v in  values:   
        acc += v
        count += 1
    return acc  
