// ete/data — layer placeholder so the library has a translation unit.
