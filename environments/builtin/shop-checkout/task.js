// shop-checkout: search (index.html) -> results (results.html?q=) -> product page
// (product.html?id=) -> cart (cart.html) -> checkout (checkout.html). Shared by all pages.
var PRODUCTS = ['T-shirt', 'Hoodie', 'Jacket', 'Sweater', 'Shorts', 'Jeans', 'Dress', 'Skirt', 'Cap', 'Scarf', 'Socks', 'Sneakers'];
var SIZES = ['S', 'M', 'L', 'XL'];
guirl.define({
  generate: function (r, U) {
    var colors = guirl.pools.colors.filter(function (c) { return c[0] !== 'white'; });
    var variants = [];
    U.sample(r, PRODUCTS, 5).forEach(function (name) {
      var price = U.int(r, 8, 80);
      U.sample(r, colors, U.int(r, 2, 4)).forEach(function (c) {
        variants.push({ id: variants.length, name: name, color: c[0], css: c[1], price: price + U.int(r, 0, 3) * 5 });
      });
    });
    var t = U.pick(r, variants);
    var size = U.pick(r, SIZES);
    var street = U.int(r, 1, 99) + ' ' + U.pick(r, guirl.pools.streets);
    var city = U.pick(r, guirl.pools.cities);
    var popular = U.sample(r, variants.filter(function (v) { return v.id !== t.id; }), 3).map(function (v) { return v.id; });
    return {
      instruction: 'Buy a "' + t.name + '" in "' + t.color + '", size "' + size + '", and ship it to "' + street + '", "' + city + '".',
      data: { variants: variants, target: t.id, size: size, street: street, city: city, popular: popular },
    };
  },
});
function label(v) { return v.name + ' (' + v.color + ')'; }
function cart(st) { return st.progress.cart || []; }
/* The shop's top bar, on every page. */
function shopBar(app, st) {
  var h = guirl.h;
  var n = cart(st).reduce(function (a, l) { return a + l.qty; }, 0);
  app.appendChild(h('div', { id: 'bar' }, [
    h('a', { id: 'home', href: 'index.html', text: 'ShopLite' }),
    h('a', { id: 'cart-link', href: 'cart.html', text: 'Cart (' + n + ')' }),
  ]));
}
