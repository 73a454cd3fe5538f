// ete/optim — layer placeholder so the library has a translation unit.
