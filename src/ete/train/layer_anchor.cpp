// ete/train — layer placeholder so the library has a translation unit.
