// ete/model — layer placeholder so the library has a translation unit.
